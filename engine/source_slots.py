"""The live decode's cross-attention store: each live sentence's source keys/values in a slot of one array per layer.

Cross keys/values are computed once per source (the encoder runs for newcomers only) and read by every step of its
sentence, so they live in slots of a store every step feeds whole: per layer (slots, heads, width, d_head), with a
mask (slots, width) of each source's real positions. A step's rows name the slot they read (``row_slots``), so
sentences join and leave without moving anyone else's keys. ``used`` slots are fed: below it, live slots and the
holes left by sentences that finished; a hole is refilled first, holes at the end stop being fed, and the store is
compacted (live slots first, width cut to the longest live source) when holes pile up or a long source leaves.
"""

from __future__ import annotations

import numpy as np


class SourceSlots:
    """Not thread-safe: the live decode's one thread stores, releases and feeds."""

    def __init__(self, n_layers: int, heads: int, d_head: int) -> None:
        self.n_layers = n_layers
        self.keys: list[np.ndarray] = [np.zeros((0, heads, 1, d_head), np.float32)] * n_layers
        self.values: list[np.ndarray] = list(self.keys)
        self.mask = np.zeros((0, 1), bool)
        self.used = 0  # slots below this are in use or holes
        self._free: list[int] = []
        self._lengths: dict[int, int] = {}  # a live slot's real source positions

    def store(self, keys: np.ndarray, values: np.ndarray, mask: np.ndarray) -> list[int]:
        """Put newcomers' cross keys/values (layers, n, heads, src, d_head) into free slots; returns the slots."""
        n, width = mask.shape
        if not self.used:  # nothing live: a store exactly as wide as the newcomers' sources
            self._resize(max(8, len(self.mask), n), width, keep=0)
        elif width > self.mask.shape[1]:  # a longer source: widen every slot (padding masked out)
            self._resize(len(self.mask), width, keep=self.used)
        while len(self._free) + len(self.mask) - self.used < n:
            self._resize(max(8, 2 * len(self.mask)), self.mask.shape[1], keep=self.used)  # double it
        slots = sorted(self._free)[:n]
        self._free = [s for s in self._free if s not in slots]
        while len(slots) < n:
            slots.append(self.used)
            self.used += 1
        index = np.array(slots)
        for i in range(self.n_layers):
            self.keys[i][index] = 0.0
            self.keys[i][index, :, :width] = keys[i]
            self.values[i][index] = 0.0
            self.values[i][index, :, :width] = values[i]
        self.mask[index] = False
        self.mask[index, :width] = mask
        self._lengths.update(zip(slots, mask.sum(axis=1).tolist(), strict=True))
        return slots

    def release(self, slot: int) -> list[int] | None:
        """The slot's sentence left. Returns None, or, when the store was compacted, the old slot of each live
        source in the order of their new slots (new slot i holds what old slot ``moved[i]`` held)."""
        del self._lengths[slot]
        self._free.append(slot)
        while self.used and (self.used - 1) in self._free:  # holes at the end stop being fed
            self.used -= 1
            self._free.remove(self.used)
        if len(self._free) > max(8, self.used // 2) or self._too_wide():
            return self._compact()
        return None

    def feeds(self) -> dict[str, np.ndarray]:
        """The step graph's cross-attention inputs: the fed slots' mask, keys and values of every layer."""
        feeds = {"src_mask": self.mask[: self.used]}
        for i in range(self.n_layers):
            feeds[f"cross_keys_{i}"] = self.keys[i][: self.used]
            feeds[f"cross_values_{i}"] = self.values[i][: self.used]
        return feeds

    def _resize(self, slots: int, width: int, keep: int) -> None:
        """New store arrays of ``slots`` x ``width`` holding the first ``keep`` slots of the old ones (the rest zeros;
        an unused slot keeps one real (zero) key, so no source is all padding)."""
        old_width = min(width, self.mask.shape[1])

        def resized(a: np.ndarray) -> np.ndarray:
            out = np.zeros((slots, a.shape[1], width, a.shape[3]), a.dtype)
            out[:keep, :, :old_width] = a[:keep, :, :old_width]
            return out

        self.keys = [resized(a) for a in self.keys]
        self.values = [resized(a) for a in self.values]
        mask = np.zeros((slots, width), bool)
        mask[:keep, :old_width] = self.mask[:keep, :old_width]
        mask[keep:, 0] = True
        self.mask = mask

    def _too_wide(self) -> bool:
        """Whether the store is a quarter wider than the longest live source: every step's cross-attention reads
        the whole width, so the padding a long sentence left behind is cut when it leaves (``_compact``)."""
        width = self.mask.shape[1]
        if width <= 8 or not self._lengths:  # (an empty store is fitted to the next newcomers by store)
            return False
        return 4 * width > 5 * max(self._lengths.values())

    def _compact(self) -> list[int]:
        """Move the live sources to the first slots (fewer holes fed to every step) and cut unused width."""
        old = np.array(sorted(self._lengths), dtype=np.int64)
        width = int(np.flatnonzero(self.mask[old].any(axis=0)).max(initial=0)) + 1  # the longest live source
        self.keys = [np.ascontiguousarray(a[old, :, :width]) for a in self.keys]
        self.values = [np.ascontiguousarray(a[old, :, :width]) for a in self.values]
        self.mask = np.ascontiguousarray(self.mask[old, :width])
        self._lengths = {new: self._lengths[slot] for new, slot in enumerate(old.tolist())}
        self._free, self.used = [], len(old)
        return old.tolist()
