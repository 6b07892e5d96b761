"""Reordering the rows of the key/value cache between decoder steps (beams trading places, finished rows leaving)
without fresh pages every step: ``np.take`` into a buffer kept per cache tensor, whose contiguous prefix
onnxruntime then reads. Used by the whole-batch search (decoder_state.py ``DecoderState``) and the live decode
(live.py ``LiveBatch``)."""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np


class ReorderBuffers:
    def __init__(self) -> None:
        self._buffers: dict[Hashable, np.ndarray] = {}

    def take(self, array: np.ndarray, rows: np.ndarray, slot: Hashable) -> np.ndarray:
        """``array[rows]`` (along the first axis) written into the buffer kept for ``slot``, grown by half again when
        too small. ``array`` is the session's last output or a view of it; were it this slot's buffer, a new buffer
        is made instead of reading and writing the same memory."""
        shape = (len(rows), *array.shape[1:])
        size = math.prod(shape)
        buffer = self._buffers.get(slot)
        if buffer is None or buffer.size < size or array.base is buffer:
            buffer = self._buffers[slot] = np.empty(size + size // 2, dtype=array.dtype)  # room to grow
        out = buffer[:size].reshape(shape)  # a contiguous prefix, as onnxruntime wants its inputs
        np.take(array, rows, axis=0, out=out, mode="clip")  # mode="raise" would copy through a temporary
        return out
