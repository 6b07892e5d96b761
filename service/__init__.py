"""The serving side: HTTP API -> scheduler -> engine (onnxruntime) -> tokenizer. Never imports torch."""
