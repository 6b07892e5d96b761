"""Greedy and beam search in numpy over a decoder with a key/value cache.

Same algorithm and conventions (``core/search.py``) as the PyTorch reference in ``model/decoding.py``:
float32 log-probabilities summed in float64, per-sentence length limits, GNMT length penalty, top
2 * beam candidates per step. Sentences that finish leave the batch, so the decoder only computes live rows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.search import Hypothesis

# step(tokens (rows, 1), rows) -> log_probs (rows, vocab), or the rows' best candidates (TopCandidates);
# ``rows`` selects and orders the cache rows (indices into the previous call's rows) before the step.


@dataclass
class TopCandidates:
    """The best tokens of each row, best first (ties: lower id first), as a decoder graph with TopK returns them."""

    log_probs: np.ndarray  # (rows, count) float32
    ids: np.ndarray  # (rows, count) int64
    full: np.ndarray | None = None  # (rows, vocab) float32, when the step also fetched every log-probability


StepFn = Callable[[np.ndarray, np.ndarray | None], "np.ndarray | TopCandidates"]


def top_candidates(log_probs: np.ndarray, count: int) -> TopCandidates:
    """Per-row ``count`` best entries of a full (rows, vocab) array, best first (ties: lower id first)."""
    if count == 1:
        ids = log_probs.argmax(axis=1)[:, None]  # the first maximum
    else:
        vocab = log_probs.shape[1]
        ids = np.argpartition(log_probs, vocab - count, axis=1)[:, vocab - count :]  # the count best, any order
        values = np.take_along_axis(log_probs, ids, axis=1)
        threshold = values.min(axis=1, keepdims=True)
        # a tie across the cut: argpartition may keep any of the tied ids; keep the lowest, as TopK does
        crossing = np.flatnonzero((log_probs == threshold).sum(axis=1) > (values == threshold).sum(axis=1))
        for row in crossing:
            lp, cut = log_probs[row], threshold[row, 0]
            above = np.flatnonzero(lp > cut)
            ids[row] = np.concatenate([above, np.flatnonzero(lp == cut)[: count - len(above)]])
        order = np.lexsort((ids, -np.take_along_axis(log_probs, ids, axis=1)), axis=1)
        ids = np.take_along_axis(ids, order, axis=1)
    return TopCandidates(np.take_along_axis(log_probs, ids, axis=1), ids)


def _beam_candidates(out: np.ndarray | TopCandidates, k: int) -> TopCandidates:
    """A beam step's candidates: at least the 2 * k best tokens of every row (fewer would change results)."""
    top = out if isinstance(out, TopCandidates) else top_candidates(out, 2 * k)
    if top.ids.shape[1] < 2 * k:
        raise ValueError(f"beam {k} needs the 2 * beam best tokens of every row; the step returned {top.ids.shape[1]}")
    return top


def greedy_search(step: StepFn, limits: list[int], bos: int, eos: int) -> list[Hypothesis]:
    if len(limits) == 1:
        return [_greedy_one(step, limits[0], bos, eos)]
    n = len(limits)
    limit = np.asarray(limits)
    active = np.arange(n)
    last = np.full((n, 1), bos, dtype=np.int64)
    scores = np.zeros(n, dtype=np.float64)
    tokens: list[list[int]] = [[] for _ in range(n)]
    rows: np.ndarray | None = None
    for t in range(max(limits)):
        out = step(last, rows)
        if isinstance(out, TopCandidates):
            best, best_log_prob = out.ids[:, 0], out.log_probs[:, 0]
        else:  # (active, vocab): argmax takes the lowest id among ties, like TopK
            best = out.argmax(axis=1)
            best_log_prob = out[np.arange(len(best)), best]
        scores[active] += best_log_prob.astype(np.float64)
        is_eos = best == eos
        for sentence, token in zip(active[~is_eos].tolist(), best[~is_eos].tolist(), strict=True):
            tokens[sentence].append(token)
        keep = ~(is_eos | (t + 1 >= limit[active]))
        if not keep.any():
            break
        rows, active, last = going_on(keep, active, best)
    return [Hypothesis(tokens[i], float(scores[i]), float(scores[i])) for i in range(n)]


def going_on(
    keep: np.ndarray, active: np.ndarray, best: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """After a greedy step: the rows that go on (None when all do, so the cache stays as it is), the sentences they
    hold, and their next input tokens."""
    rows = None if keep.all() else np.flatnonzero(keep)
    if rows is not None:
        active = active[keep]
    return rows, active, best[keep].reshape(-1, 1).astype(np.int64)


def _greedy_one(step: StepFn, limit: int, bos: int, eos: int) -> Hypothesis:
    """greedy_search for one sentence with Python scalars (a step's bookkeeping costs as much as 10% of a
    one-row decoder step in numpy calls). Same choices and sums: argmax's first maximum, float32 -> float64."""
    tokens: list[int] = []
    score = 0.0
    last = np.full((1, 1), bos, dtype=np.int64)
    for _ in range(limit):
        out = step(last, None)
        if isinstance(out, TopCandidates):
            best, log_prob = int(out.ids[0, 0]), float(out.log_probs[0, 0])
        else:
            row = out[0]
            best = int(row.argmax())
            log_prob = float(row[best])
        score += log_prob
        if best == eos:
            break
        tokens.append(best)
        last = np.full((1, 1), best, dtype=np.int64)
    return Hypothesis(tokens, score, score)


def beam_search(
    step: StepFn,
    limits: list[int],
    bos: int,
    eos: int,
    beam_size: int,
    length_penalty: float,
    n_best: int,
) -> list[list[Hypothesis]]:
    """``step`` rows start as each sentence repeated ``beam_size`` times (sentence-major).

    The 2 * beam best continuations of a sentence are among the 2 * beam best tokens of each of its beams
    (a beam adds one score to all its tokens), so only those are ranked: (sentences, beam * 2 * beam)
    candidates instead of (sentences, beam * vocab), in one vectorized pass over the batch.
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be in 1..beam_size ({beam_size}), got {n_best}")
    if len(limits) == 1:
        return [_beam_one(step, limits[0], bos, eos, beam_size, length_penalty, n_best)]
    n, k = len(limits), beam_size
    limit = np.asarray(limits)
    finished: list[list[Hypothesis]] = [[] for _ in range(n)]
    n_finished = np.zeros(n, dtype=np.int64)
    active = np.arange(n)  # sentence ids of the live rows, k rows each
    beam_scores = np.zeros((n, k), dtype=np.float64)
    beam_scores[:, 1:] = -np.inf  # identical start beams: keep one alive
    history = np.full((n * k, 0), bos, dtype=np.int64)  # generated tokens of each live row
    last = np.full((n * k, 1), bos, dtype=np.int64)
    rows: np.ndarray | None = None
    for t in range(max(limits)):
        top = _beam_candidates(step(last, rows), k)  # (active*k, c), c >= 2k
        ended, next_rows, next_ids, next_scores = rank(beam_scores, top.log_probs, top.ids, k, eos)
        for i, row, score in ended:
            finished[active[i]].append(Hypothesis.beam(history[row].tolist(), score, t + 1, length_penalty))
            n_finished[active[i]] += 1
        done = n_finished[active] >= k
        at_limit = ~done & (t + 1 >= limit[active])
        for i in np.flatnonzero(at_limit):  # length limit: the live hypotheses end as they are
            for row, token, score in zip(
                next_rows[i].tolist(), next_ids[i].tolist(), next_scores[i].tolist(), strict=True
            ):
                seq = history[row].tolist() + [token]
                finished[active[i]].append(Hypothesis.beam(seq, score, len(seq), length_penalty))
        still = ~(done | at_limit)
        if not still.any():
            break
        rows = next_rows[still].reshape(-1)
        last = next_ids[still].reshape(-1, 1).astype(np.int64)
        history = np.concatenate([history[rows], last], axis=1)
        beam_scores = next_scores[still]
        active = active[still]
    return [sorted(f, key=lambda h: -h.normalized)[:n_best] for f in finished]


@functools.cache
def _beam_offsets(k: int, c: int) -> np.ndarray:
    """The beam of each of k x c candidates, shifted above any token id: adding the token id gives the order of
    beam * vocab + token in a full ranking (ties: lower beam first, then lower token)."""
    offsets = np.repeat(np.arange(k, dtype=np.int64), c)[None, :] * (1 << 32)
    offsets.flags.writeable = False
    return offsets


def rank(
    scores: np.ndarray, log_probs: np.ndarray, ids: np.ndarray, k: int, eos: int
) -> tuple[list[tuple[int, int, float]], np.ndarray, np.ndarray, np.ndarray]:
    """One beam step for m sentences at once: their beams' running ``scores`` (m, k) float64 and each row's candidate
    ``log_probs`` / ``ids`` (m * k, c), rows sentence-major. Ranks each sentence's k x c candidates by score, then
    beam, then token (float32 log-probs added in float64) and returns the hypotheses that end (EOS among a sentence's
    k best: (sentence, row, score), sentence by sentence, best first) and the k best other candidates of each
    sentence, which continue: their rows (sentence * k + beam), tokens and scores, (m, k) each, best first."""
    m, c = scores.shape[0], ids.shape[1]
    total = (scores[:, :, None] + log_probs.astype(np.float64).reshape(m, k, c)).reshape(m, k * c)
    flat_ids = ids.reshape(m, k * c)
    order = np.lexsort((_beam_offsets(k, c) + flat_ids, -total), axis=1)[:, : 2 * k]  # (m, 2k)
    sentence = np.arange(m)[:, None]
    cand_scores, cand_ids = total[sentence, order], flat_ids[sentence, order]
    cand_rows = sentence * k + order // c
    is_eos = cand_ids == eos
    ended = [
        (int(i), int(cand_rows[i, r]), float(cand_scores[i, r]))
        for i, r in zip(*np.nonzero(is_eos[:, :k]), strict=True)
    ]
    # the k best other candidates continue (a sentence has at most k EOS candidates among its 2k)
    chosen = np.flatnonzero(((~is_eos) & (np.cumsum(~is_eos, axis=1) <= k)).reshape(-1))
    next_rows, next_ids, next_scores = (a.reshape(-1)[chosen].reshape(m, k) for a in (cand_rows, cand_ids, cand_scores))
    return ended, next_rows, next_ids, next_scores


def rank_one(
    scores: list[float], log_probs: list[list[float]], ids: list[list[int]], k: int, eos: int
) -> tuple[list[tuple[int, float]], list[tuple[int, int, float]]]:
    """``rank`` for one sentence in Python scalars (its two dozen numpy calls cost about a fifth of a 4-row
    decoder step): its k beams' running ``scores`` and each beam's candidate ``log_probs`` / ``ids``.
    Ranks the k x c candidates as ``rank`` does (score, then beam, then token; float32 log-probs added in
    float64) and returns the hypotheses that end (EOS among the k best: (beam, score), best first) and the k best
    other candidates that continue ((beam, token, score), best first)."""
    candidates = sorted(
        (-(scores[b] + lp), b, token) for b in range(k) for lp, token in zip(log_probs[b], ids[b], strict=True)
    )[: 2 * k]
    ended: list[tuple[int, float]] = []
    going: list[tuple[int, int, float]] = []
    for place, (negative, beam, token) in enumerate(candidates):
        if token == eos:
            if place < k:
                ended.append((beam, -negative))
        elif len(going) < k:
            going.append((beam, token, -negative))
    return ended, going


def _beam_one(
    step: StepFn, limit: int, bos: int, eos: int, k: int, length_penalty: float, n_best: int
) -> list[Hypothesis]:
    """beam_search for one sentence, ranked by ``rank_one``: the same hypotheses, with Python scalars."""
    finished: list[Hypothesis] = []
    scores = [0.0] + [-math.inf] * (k - 1)  # identical start beams: keep one alive
    history: list[list[int]] = [[] for _ in range(k)]
    last = np.full((k, 1), bos, dtype=np.int64)
    rows: np.ndarray | None = None
    for t in range(limit):
        top = _beam_candidates(step(last, rows), k)
        ended, going = rank_one(scores, top.log_probs.tolist(), top.ids.tolist(), k, eos)
        for beam, score in ended:
            finished.append(Hypothesis.beam(history[beam][:], score, t + 1, length_penalty))
        if len(finished) >= k:
            break
        if t + 1 >= limit:  # length limit: the live hypotheses end as they are
            for beam, token, score in going:
                seq = [*history[beam], token]
                finished.append(Hypothesis.beam(seq, score, len(seq), length_penalty))
            break
        history = [[*history[beam], token] for beam, token, _ in going]
        scores = [score for _, _, score in going]
        rows = np.array([beam for beam, _, _ in going], dtype=np.int64)
        last = np.array([token for _, token, _ in going], dtype=np.int64).reshape(k, 1)
    return sorted(finished, key=lambda h: -h.normalized)[:n_best]
