"""Batching between the serving layer and the engine."""
