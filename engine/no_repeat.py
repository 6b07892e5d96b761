"""No n-gram twice in a hypothesis (``TranslateOptions.no_repeat_ngram_size``, as CTranslate2's and fairseq's
option of that name): a step wrapper that sets the log-probability of every token that would complete an n-gram
the row's hypothesis already holds to -inf.

The wrapper sits between a search (engine/search.py; not the constrained searches) and its ``StepFn``:
each call's ``rows`` (which previous rows go on, in which order) and ``last`` (each row's new token) are all it
needs to keep every row's tokens, so the searches do not change. A row's ban depends on its own tokens only, so a
sentence decodes alike alone and in any batch.

A banned token among the graph's top candidates is replaced by the next best one. With ``widen`` (the step graph's
TopK asked, for that step only, for as many more candidates as a row has banned tokens) the candidates left once the
banned ones are dropped hold it, and no step fetches the whole vocabulary's log-probabilities (fetching and copying
them made beam 4 1.8x slower: docs/general-domain.md). Without it, a step's every log-probability
(``TopCandidates.full`` or the plain array) is masked. Measured on the general-domain model (docs/general-domain.md):
a 4-gram block removed 15 of 15 greedy loops and 7 of 8 beam-4 loops on 2,998 news sentences, BLEU within 0.05.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.tokenizer import EOS_ID
from engine.search import StepFn, TopCandidates, top_candidates


class NgramHistory:
    """One hypothesis's generated tokens and, for each (n - 1)-gram in them, the tokens that followed it: ``banned``
    is what would complete an n-gram it already holds. The block's one bookkeeping, for the step wrapper below and
    for checking the search loop graph's answer (engine/search_loop.py)."""

    __slots__ = ("size", "tokens", "followers")

    def __init__(self, size: int, tokens: list[int] | None = None, followers: dict | None = None) -> None:
        self.size, self.tokens = size, tokens if tokens is not None else []
        self.followers: dict[tuple[int, ...], frozenset[int]] = followers if followers is not None else {}

    def copy(self) -> NgramHistory:  # the sets are frozen: sharing them between copies is safe
        return NgramHistory(self.size, self.tokens[:], dict(self.followers))

    def append(self, token: int) -> None:
        self.tokens.append(token)
        n = self.size
        if len(self.tokens) >= n:
            key = tuple(self.tokens[len(self.tokens) - n : -1])
            self.followers[key] = self.followers.get(key, frozenset()) | {token}

    def banned(self) -> frozenset[int]:
        n = self.size
        if len(self.tokens) < n - 1:
            return frozenset()
        return self.followers.get(tuple(self.tokens[len(self.tokens) - n + 1 :]), frozenset())


def follow(rows: list[NgramHistory], order: list[int]) -> list[NgramHistory]:
    """The rows that go on, in ``order``; a row taken twice (two beams from one parent) is copied."""
    taken: set[int] = set()
    out = []
    for r in order:
        out.append(rows[r].copy() if r in taken else rows[r])
        taken.add(r)
    return out


class NoRepeatNgram:
    """``step`` with every token that would repeat an n-gram of its row banned (``size`` >= 1; 1 bans every token
    already generated). The first call's ``last`` is the start token (not part of any n-gram)."""

    def __init__(self, step: StepFn, size: int, widen: Callable[[int], bool] | None = None) -> None:
        """``widen(extra)``: the next step returns ``extra`` more top candidates per row (0: as many as before);
        False when it cannot (_DecoderState.widen)."""
        if size < 1:
            raise ValueError(f"no_repeat_ngram_size must be at least 1, got {size}")
        self.step_fn, self.size, self.widen = step, size, widen
        self.rows: list[NgramHistory] | None = None

    def __call__(self, last: np.ndarray, rows: np.ndarray | None) -> np.ndarray | TopCandidates:
        if self.rows is None:  # the start token
            self.rows = [NgramHistory(self.size) for _ in range(len(last))]
        else:
            if rows is not None:
                self.rows = follow(self.rows, rows.tolist())
            for row, token in zip(self.rows, last[:, 0].tolist(), strict=True):
                row.append(token)
        banned = [row.banned() for row in self.rows]
        extra = max(map(len, banned), default=0)
        if not extra:
            return self.step_fn(last, rows)
        widened = self.widen is not None and self.widen(extra)
        try:
            out = self.step_fn(last, rows)
        finally:
            if widened:
                self.widen(0)  # type: ignore[misc]
        if isinstance(out, TopCandidates) and out.full is None:
            # widened: exact; not (more banned tokens than the graph's TopK serves beyond top_k, a block that long
            # is rare): the candidates left, the missing ones at -inf
            return self._drop(out, banned, out.ids.shape[1] - (extra if widened else 0))
        return self._mask(out, banned)

    @staticmethod
    def _drop(out: TopCandidates, banned: list[frozenset[int]], count: int) -> TopCandidates:
        """The ``count`` best candidates of each row that are not banned (``drop_banned``): each row has at most
        ``extra`` banned ones among its ``count + extra``, so those left hold the best ``count`` of the masked
        distribution."""
        padded = np.full((len(banned), max(map(len, banned))), -1, np.int64)
        for i, tokens in enumerate(banned):
            padded[i, : len(tokens)] = sorted(tokens)
        ids, log_probs = drop_banned(out.ids, out.log_probs, padded, count)
        return TopCandidates(log_probs, ids)

    @staticmethod
    def _mask(out: np.ndarray | TopCandidates, banned: list[frozenset[int]]) -> np.ndarray | TopCandidates:
        full = out.full if isinstance(out, TopCandidates) else out
        if full is None:
            raise ValueError("no_repeat_ngram_size needs every log-probability of a step (fetch_full)")
        full = full.copy()
        for i, tokens in enumerate(banned):
            if tokens:
                full[i, list(tokens)] = -np.inf
        if not isinstance(out, TopCandidates):
            return full
        top = top_candidates(full, out.ids.shape[1])
        top.full = full
        return top


def repeats_ngram(tokens: list[int], size: int) -> bool:
    """Whether some n-gram of ``size`` tokens occurs twice in ``tokens``."""
    grams = [tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]
    return len(grams) != len(set(grams))


def banned_after(history: np.ndarray, lengths: np.ndarray, size: int) -> np.ndarray:
    """``NoRepeatNgram``'s ban for many rows at once, from a token matrix (the live decode's ``history``): row r's
    generated tokens are the last ``lengths[r]`` columns of ``history[r]``. Returns (rows, m) banned token ids, each
    row's first, the rest -1 (m: the most any row has; 0 columns when none has one)."""
    rows, width = history.shape
    windows = width - size + 1  # n-grams whose first n - 1 tokens could be the row's last n - 1: those starting at j
    if rows == 0 or windows <= 0:
        return np.zeros((rows, 0), np.int64)
    match = np.arange(windows)[None, :] >= (width - np.asarray(lengths))[:, None]  # inside the generated tokens
    for i in range(size - 1):  # its first n - 1 tokens equal the row's last n - 1
        match &= history[:, i : i + windows] == history[:, width - size + 1 + i : width - size + 2 + i]
    followers = history[:, size - 1 : size - 1 + windows]
    counts = match.sum(axis=1)
    most = int(counts.max())
    if most == 0:
        return np.zeros((rows, 0), np.int64)
    order = np.argsort(~match, axis=1, kind="stable")[:, :most]  # each row's matches first
    banned = np.take_along_axis(followers, order, axis=1).astype(np.int64)
    banned[np.arange(most)[None, :] >= counts[:, None]] = -1
    return banned


def drop_banned(ids: np.ndarray, log_probs: np.ndarray, banned: np.ndarray, count: int):
    """Each row's ``count`` best candidates (``ids`` / ``log_probs``, best first) that ``banned`` (rows, m; -1
    pads) leaves; where fewer are left, the missing ones are EOS at -inf (only when the step could not rank
    enough more candidates)."""
    out = (ids[:, :count], log_probs[:, :count])
    if banned.shape[1] == 0:
        return out
    hit = (ids[:, :, None] == banned[:, None, :]).any(axis=2)
    if not hit.any():
        return out
    order = np.argsort(hit, axis=1, kind="stable")[:, :count]  # the ones left first, in their order
    ids, log_probs = np.take_along_axis(ids, order, axis=1), np.take_along_axis(log_probs, order, axis=1)
    short = np.take_along_axis(hit, order, axis=1)
    ids[short], log_probs[short] = EOS_ID, -np.inf
    return ids, log_probs
