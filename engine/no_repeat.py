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


class NoRepeatNgram:
    """The block's one processor, between every search of the engine and its ``StepFn`` (the whole-batch greedy and
    beam searches; the live decode and the search loop's check call ``banned_after`` on their own token matrices):
    ``step`` with every token that would repeat an n-gram of its row banned (``size`` >= 1; 1 bans every token
    already generated). It keeps each row's generated tokens as one matrix; the first call's ``last`` is the start
    token (not part of any n-gram)."""

    def __init__(self, step: StepFn, size: int, widen: Callable[[int], bool] | None = None) -> None:
        """``widen(extra)``: the next step returns ``extra`` more top candidates per row (0: as many as before);
        False when it cannot (engine/decoder_state.py DecoderState.widen)."""
        if size < 1:
            raise ValueError(f"no_repeat_ngram_size must be at least 1, got {size}")
        self.step_fn, self.size, self.widen = step, size, widen
        self.history: np.ndarray | None = None  # (rows, generated tokens)

    def __call__(self, last: np.ndarray, rows: np.ndarray | None) -> np.ndarray | TopCandidates:
        if self.history is None:  # the start token
            self.history = np.zeros((len(last), 0), np.int64)
        else:
            going_on = self.history if rows is None else self.history[rows]
            self.history = np.concatenate([going_on, last[:, :1].astype(np.int64)], axis=1)
        rows_now, width = self.history.shape
        banned = banned_after(self.history, np.full(rows_now, width), self.size)
        extra = int((banned >= 0).sum(axis=1).max()) if banned.size else 0
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
            # is rare): the candidates left, the missing ones at -inf. Each row has at most ``extra`` banned ones
            # among its ``count + extra``, so those left hold the best ``count`` of the masked distribution
            ids, log_probs = drop_banned(out.ids, out.log_probs, banned, out.ids.shape[1] - (extra if widened else 0))
            return TopCandidates(log_probs, ids)
        return self._mask(out, banned)

    @staticmethod
    def _mask(out: np.ndarray | TopCandidates, banned: np.ndarray) -> np.ndarray | TopCandidates:
        full = out.full if isinstance(out, TopCandidates) else out
        if full is None:
            raise ValueError("no_repeat_ngram_size needs every log-probability of a step (fetch_full)")
        full = full.copy()
        for i, tokens in enumerate(banned):
            tokens = tokens[tokens >= 0]
            if tokens.size:
                full[i, tokens] = -np.inf
        if not isinstance(out, TopCandidates):
            return full
        top = top_candidates(full, out.ids.shape[1])
        top.full = full
        return top


def banned_after(history: np.ndarray, lengths: np.ndarray, size: int) -> np.ndarray:
    """The rule, its one definition: the tokens that would complete an n-gram (n = ``size``) a row's generated
    tokens already hold, i.e. each token that followed an earlier occurrence of the row's last n - 1 tokens (n = 1:
    every token generated). Row r's generated tokens are the last ``lengths[r]`` columns of ``history[r]`` (the
    live decode's left-padded matrix; NoRepeatNgram's is full). Returns (rows, m) banned token ids, each row's
    first, the rest -1 (m: the most any row has; 0 columns when none has one). The fused search's C operator
    (native/fused_step/) applies the same rule; tests/engine/test_fused_step.py compares it with this one."""
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


def repeats_ngram(tokens: list[int], size: int) -> bool:
    """Whether some n-gram of ``size`` tokens occurs twice in ``tokens``: some token is one the rule bans after the
    tokens before it."""
    history = np.asarray([tokens], np.int64)
    return any(tokens[i] in banned_after(history[:, :i], np.array([i]), size)[0] for i in range(len(tokens)))


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
