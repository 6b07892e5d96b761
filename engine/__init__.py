"""Torch-free inference on a bundle (core/bundle.py): onnxruntime sessions, numpy greedy/beam search."""

from engine.engine import Engine, TranslateOptions

__all__ = ["Engine", "TranslateOptions"]
