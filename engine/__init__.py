"""Torch-free inference on a bundle (core/bundle.py): onnxruntime sessions, numpy greedy/beam search."""

from engine.decoding import TranslateOptions
from engine.engine import Engine

__all__ = ["Engine", "TranslateOptions"]
