"""The live decode's bookkeeping (engine/live.py): a live sentence, the sentences of one beam size with their next
rows as arrays a step reads without a loop over them, and what one step produced."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from core.search import Hypothesis
from core.tokenizer import BOS_ID
from engine.decoding import TranslateOptions
from engine.translation import Translation


@dataclass(eq=False)
class LiveSentence:
    key: Hashable
    source: list[int]
    options: TranslateOptions
    limit: int
    stream: bool
    slot: int  # its source's place in the cross keys/values store
    finished: list[Hypothesis] = field(default_factory=list)  # beam hypotheses that ended
    emitted: int = 0  # tokens handed out as progress (streaming)
    vocab: np.ndarray | None = None  # its shortlist ids (Engine.vocab_subset); None: it needs the whole vocabulary

    @property
    def k(self) -> int:
        return self.options.beam_size


@dataclass(eq=False)
class LiveGroup:
    """The live sentences of one beam size and, between steps, their next rows: ``parent`` (m, k) the cache row
    each continues (-1: a newcomer), ``token`` the token it feeds next, ``score`` its running score. Per sentence,
    as arrays that a step reads without a loop over the sentences: ``slots`` (its source's slot), ``limits`` (its
    length limit), ``joined`` (the step counter at its first step) and ``ended`` (beam hypotheses that ended)."""

    k: int
    sentences: list[LiveSentence] = field(default_factory=list)
    parent: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int64))
    token: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int64))
    score: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.float64))
    slots: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    limits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    joined: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ended: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    offset: int = 0  # its first row in the current layout

    def __post_init__(self) -> None:
        self.parent = np.zeros((0, self.k), np.int64)
        self.token = np.zeros((0, self.k), np.int64)
        self.score = np.zeros((0, self.k), np.float64)

    def append(self, sentence: LiveSentence, first_step: int) -> None:
        self.sentences.append(sentence)
        start = np.full((1, self.k), -np.inf)
        start[0, 0] = 0.0  # identical start beams: keep one alive (as search.beam_search)
        self.parent = np.concatenate([self.parent, np.full((1, self.k), -1, np.int64)])
        self.token = np.concatenate([self.token, np.full((1, self.k), BOS_ID, np.int64)])
        self.score = np.concatenate([self.score, start])
        self.slots = np.append(self.slots, sentence.slot)
        self.limits = np.append(self.limits, sentence.limit)
        self.joined = np.append(self.joined, first_step)
        self.ended = np.append(self.ended, 0)

    def drop(self, keep: np.ndarray) -> None:
        if keep.all():  # the usual step: nobody leaves
            return
        self.sentences = [s for s, k in zip(self.sentences, keep.tolist(), strict=True) if k]
        self.parent, self.token, self.score = self.parent[keep], self.token[keep], self.score[keep]
        self.slots, self.limits = self.slots[keep], self.limits[keep]
        self.joined, self.ended = self.joined[keep], self.ended[keep]


@dataclass
class StepOutput:
    """What one step produced: sentences that finished (key, Translation), streaming progress (key -> tokens that
    became final this step: greedy's new token, or the new part of the prefix every live beam and every ended
    hypothesis of the sentence shares, which can never change), and the rows that ran."""

    finished: list[tuple[Hashable, Translation]] = field(default_factory=list)
    progress: dict[Hashable, list[int]] = field(default_factory=dict)
    rows: int = 0
    seconds: float = 0.0
    generated_tokens: int = 0
    failed: list[tuple[Hashable, Exception]] = field(default_factory=list)  # (key, why): a decode in another process
