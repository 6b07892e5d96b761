"""The live decode's cross-attention store (engine/source_slots.py) without a model: slots reused, holes
at the end no longer fed, and a compaction that says where every live source went."""

from __future__ import annotations

import numpy as np

from engine.source_slots import SourceSlots

LAYERS, HEADS, D_HEAD = 2, 2, 3


def encoded(*lengths: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cross keys/values (layers, n, heads, width, d_head) whose every entry is its source's length, and the mask."""
    width = max(lengths)
    mask = np.array([[j < n for j in range(width)] for n in lengths])
    keys = np.zeros((LAYERS, len(lengths), HEADS, width, D_HEAD), np.float32)
    for i, n in enumerate(lengths):
        keys[:, i, :, :n] = n
    return keys, -keys, mask


def test_a_freed_slot_is_refilled_first_and_trailing_holes_stop_being_fed():
    slots = SourceSlots(LAYERS, HEADS, D_HEAD)
    assert slots.store(*encoded(3, 5, 4)) == [0, 1, 2] and slots.used == 3
    assert slots.mask.shape[1] == 5  # an empty store is as wide as its newcomers
    assert slots.release(1) is None and slots.used == 3  # a hole in the middle is still fed
    assert slots.store(*encoded(2)) == [1]
    assert slots.keys[0][1, 0, :2, 0].tolist() == [2, 2] and not slots.mask[1, 2:].any()  # old entries cleared
    assert slots.release(2) is None and slots.used == 2  # the last slot: no longer fed
    feeds = slots.feeds()
    assert feeds["src_mask"].shape == (2, 5) and feeds["cross_values_1"].shape == (2, HEADS, 5, D_HEAD)


def test_a_long_source_leaving_compacts_the_store_and_says_where_the_others_went():
    slots = SourceSlots(LAYERS, HEADS, D_HEAD)
    slots.store(*encoded(2, 3))
    slots.store(*encoded(20))  # widens every slot
    assert slots.mask.shape[1] == 20
    moved = slots.release(2)  # the long one leaves: the store is cut to the longest live source
    assert moved == [0, 1] and slots.mask.shape[1] == 3 and slots.used == 2
    assert slots.keys[1][1, 0, :, 0].tolist() == [3, 3, 3]
    slots.store(*encoded(2, 2, 2, 2, 2, 2, 2, 2, 2))  # slots 2..10 (the store doubled)
    for slot in range(2, 10):
        slots.release(slot)
    moved = slots.release(0)  # more holes than half the fed slots: live sources move to the front
    assert moved == [1, 10] and slots.used == 2
    assert slots.keys[0][0, 0, :3, 0].tolist() == [3, 3, 3] and slots.mask[1].sum() == 2
