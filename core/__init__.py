"""Torch-free definitions shared by model/ (training), export/ (ONNX) and service/ (serving), each defined once.

- ``core.tokenizer``: the SentencePiece tokenizer and the special token ids.
- ``core.search``: what greedy and beam search share in PyTorch and numpy (hypothesis, length limits, penalty).
- ``core.normalize``: the text normalisation of training data (NFC, ASCII quotes, whitespace, Simplified
  Chinese through OpenCC, imported only when Chinese is normalised).
- ``core.graphs``: the ONNX graph interface (input / output names, metadata keys, the integer interface version).
- ``core.bundle``: the bundle format: a model repository's versions, the manifest written by export/ and read and
  verified by service/.

Nothing here imports torch, onnx, FastAPI or any other package of this repository.
"""
