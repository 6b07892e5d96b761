"""The Open Inference Protocol v2 (KServe, Triton): /v2 metadata, health, infer, repository, statistics."""
