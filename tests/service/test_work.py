"""Typed work: frozen options are the batch key, and one runner dispatches each kind to the engine."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.decoding import TranslateOptions
from service.execution.work import AttentionOptions, EmbedOptions, Source, engine_runner


def test_options_are_frozen_hashable_batch_keys():
    a, b = TranslateOptions(beam_size=4, max_length=20), TranslateOptions(beam_size=4, max_length=20)
    assert a == b and hash(a) == hash(b)
    assert a != TranslateOptions(beam_size=4, max_length=21)
    assert EmbedOptions("mean", True) != EmbedOptions("max", True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.beam_size = 1  # type: ignore[misc]
    assert AttentionOptions() != AttentionOptions()  # each attention request is its own batch
    assert TranslateOptions() != EmbedOptions()  # kinds never share a batch


class RecordingEngine:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def translate_ids(self, ids, options, stats, constraints=None):
        self.calls.append(("translate", ids, options))
        stats["decode"] = 0.1
        return [f"t{len(i)}" for i in ids]

    def embed_ids(self, ids, pooling, normalize, stats):
        self.calls.append(("embed", ids, pooling, normalize))
        return np.zeros((len(ids), 2), dtype=np.float32)

    def attention_ids(self, ids, target):
        self.calls.append(("attention", ids, target))
        return {"ids": ids, "target": target}


def test_runner_passes_each_kind_its_options_and_sources():
    engine = RecordingEngine()
    run = engine_runner(engine)
    options = TranslateOptions(beam_size=2)
    results, stats = run(options, [Source([5, 2]), Source([6, 7, 2])])
    assert results == ["t2", "t3"] and stats == {"decode": 0.1}
    assert engine.calls[-1] == ("translate", [[5, 2], [6, 7, 2]], options)
    vectors, _ = run(EmbedOptions("max", False), [Source([5, 2])])
    assert len(vectors) == 1 and engine.calls[-1] == ("embed", [[5, 2]], "max", False)
    [attention], _ = run(AttentionOptions(), [Source([5, 2], target_ids=[9])])
    assert attention == {"ids": [5, 2], "target": [9]}
    with pytest.raises(TypeError, match="unknown kind of work"):
        run(("translate", 4), [Source([5, 2])])  # a tuple key is no longer work
