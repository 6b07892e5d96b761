"""Typed work: what the serving layer hands the scheduler and the scheduler hands the engine.

Each kind of work has a frozen options dataclass, and the options object is the batch key: only sentences
with equal options share an engine batch (``TranslateOptions`` lives with the engine, which takes it).
A ``Source`` is one sentence of a request. ``engine_runner`` runs one batch on an engine, whatever its kind (the
scheduler's BatchRunner, service/scheduling/runners.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.decoding import TranslateOptions
from engine.engine import Engine
from service.scheduling.runners import BatchRunner, Stats


@dataclass(frozen=True)
class EmbedOptions:
    pooling: str = "mean"  # mean | max over the encoder states (EOS included)
    normalize: bool = True  # L2


@dataclass(frozen=True, eq=False)
class AttentionOptions:
    """Attention maps of one source (and target). Compared by identity: every attention request is its own batch
    (its matrices grow with the square of the lengths, and nothing is shared between two sources)."""


WorkOptions = TranslateOptions | EmbedOptions | AttentionOptions


@dataclass(frozen=True)
class Source:
    ids: list[int]  # subword ids + EOS
    target_ids: list[int] | None = None  # a given target (attention), EOS excluded
    constraints: tuple = ()  # target token sequences the translation must hold (engine/constrained.py)

    @property
    def length(self) -> int:
        return len(self.ids)


def engine_runner(engine: Engine) -> BatchRunner:
    """The batch runner of one engine: translations, embedding vectors or attention dicts, one per source."""

    def run_batch(options: WorkOptions, sources: list[Source]) -> tuple[list[Any], Stats]:
        stats: Stats = {}
        ids = [s.ids for s in sources]
        if isinstance(options, TranslateOptions):
            constraints = [s.constraints for s in sources] if options.constrained else None
            return engine.translate_ids(ids, options, stats, constraints), stats
        if isinstance(options, EmbedOptions):
            return list(engine.embed_ids(ids, options.pooling, options.normalize, stats)), stats
        if isinstance(options, AttentionOptions):
            return [engine.attention_ids(s.ids, s.target_ids) for s in sources], stats
        raise TypeError(f"unknown kind of work: {type(options).__name__}")

    return run_batch
