"""Typed work: what the serving layer hands the scheduler and the scheduler hands the engine.

Each kind of work has a frozen options dataclass, and the options object is the batch key: only sentences
with equal options share an engine batch (``TranslateOptions`` lives with the engine, which takes it).
A ``Source`` is one sentence of a request. ``run_batch`` runs one batch on an engine, whatever its kind.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from core.search import length_limits
from service.engine.engine import Engine, TranslateOptions
from service.engine.live import LiveBatch, StepOutput, supports_live


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

    @property
    def length(self) -> int:
        return len(self.ids)


Stats = dict[str, float]  # encode / decode seconds, generated_tokens
# (options, sources) -> (one result per source, stats); tests wrap it to inject faults
BatchRunner = Callable[[WorkOptions, list[Source]], tuple[list[Any], Stats]]


def engine_runner(engine: Engine) -> BatchRunner:
    """The batch runner of one engine: translations, embedding vectors or attention dicts, one per source."""

    def run_batch(options: WorkOptions, sources: list[Source]) -> tuple[list[Any], Stats]:
        stats: Stats = {}
        ids = [s.ids for s in sources]
        if isinstance(options, TranslateOptions):
            return engine.translate_ids(ids, options, stats), stats
        if isinstance(options, EmbedOptions):
            return list(engine.embed_ids(ids, options.pooling, options.normalize, stats)), stats
        if isinstance(options, AttentionOptions):
            return [engine.attention_ids(s.ids, s.target_ids) for s in sources], stats
        raise TypeError(f"unknown kind of work: {type(options).__name__}")

    return run_batch


class LiveRunner:
    """Continuous batching on one engine: translation sentences join a live decode, one decoder step at a time
    (service/engine/live.py); the scheduler's engine thread is the only caller."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.batch = LiveBatch(engine)
        self.bytes_per_position = self.batch.bytes_per_position()

    @staticmethod
    def accepts(options: Any) -> bool:
        """Translations decode live; embeddings and attention run as whole batches."""
        return isinstance(options, TranslateOptions)

    def cost(self, options: TranslateOptions, source: Source) -> tuple[int, int]:
        """(decoder rows, cache positions it may reach) of one sentence: its beam size and its length limit."""
        limit = length_limits([source.length], self.engine.max_source_tokens, options.max_length)[0]
        return options.beam_size, limit

    def join(self, items: list[tuple[Hashable, TranslateOptions, Source, bool]]) -> tuple[list[tuple[Any, Any]], float]:
        """(key, options, source, stream) join at the next step; returns those answered at once and encode seconds."""
        return self.batch.add([(key, source.ids, options, stream) for key, options, source, stream in items])

    def leave(self, key: Hashable) -> bool:
        return self.batch.remove(key)

    def step(self) -> StepOutput:
        return self.batch.step()

    def reset(self) -> None:
        """Drop everything live (after a failed step the state is not trusted)."""
        self.batch = LiveBatch(self.engine)

    @property
    def rows(self) -> int:
        return self.batch.rows


def live_runner(engine: Engine) -> LiveRunner | None:
    """The engine's live runner, or None when its bundle has no interface-3 step graph (re-export it)."""
    return LiveRunner(engine) if supports_live(engine) else None
