"""decoder.onnx's self-attention cache in numpy: a key/value cache or a linear-attention running state.

The two kinds and their input names are defined in ``core/graphs.py``; a graph's input names say which it has.
"""

from __future__ import annotations

import numpy as np

from core.graphs import LINEAR_STATE, decoder_inputs


def empty_cache(cache: str, cross_keys: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """decoder.onnx's self-attention cache before the first token (core/graphs.py): keys and values of no token
    (kv), or zero running sums (linear_state). ``cross_keys`` (layers, sources, heads, src, d_head) gives the sizes."""
    layers, _, heads, _, d_head = cross_keys.shape
    if cache == LINEAR_STATE:
        return (
            np.zeros((layers, rows, heads, d_head, d_head), dtype=cross_keys.dtype),
            np.zeros((layers, rows, heads, 1, d_head), dtype=cross_keys.dtype),
        )
    empty = np.zeros((layers, rows, heads, 0, d_head), dtype=cross_keys.dtype)
    return empty, empty


def decoder_feeds(cache: str, past: tuple[np.ndarray, np.ndarray], length: int) -> dict[str, np.ndarray]:
    """The cache inputs of decoder.onnx: the two cache tensors, and the linear state's token count."""
    feeds = dict(zip(decoder_inputs(cache)[4:6], past, strict=True))
    if cache == LINEAR_STATE:
        feeds["past_length"] = np.array([length], dtype=np.int64)
    return feeds
