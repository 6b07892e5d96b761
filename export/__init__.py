"""Turn a trained checkpoint into a verifiable ONNX bundle (graphs, tokenizer, manifest with sha256)."""
