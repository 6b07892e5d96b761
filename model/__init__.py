"""PyTorch side of the project: the Transformer, its tokenizer, training and reference decoding.

Nothing in ``service/`` imports this package: serving runs on onnxruntime without torch.
"""
