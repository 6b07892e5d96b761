"""Torch-free inference: bundle loading and verification, onnxruntime sessions, numpy greedy/beam search."""

from service.engine.bundle import Bundle, BundleError, load_bundle
from service.engine.engine import Engine, TranslateOptions

__all__ = ["Bundle", "BundleError", "Engine", "TranslateOptions", "load_bundle"]
