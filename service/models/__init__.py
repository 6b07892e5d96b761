"""The loaded models: the registry (one scheduler each; loaded, swapped, unloaded while serving) and version swaps
announced across replicas."""
