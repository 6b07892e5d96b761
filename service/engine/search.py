"""Greedy and beam search in numpy over a decoder with a key/value cache.

Same algorithm and conventions as the PyTorch reference in ``model/decoding.py`` (see its docstring):
float32 log-probabilities summed in float64, per-sentence length limits, GNMT length penalty, top
2 * beam candidates per step. Sentences that finish leave the batch, so the decoder only computes live rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# step(tokens (rows, 1), rows) -> log_probs (rows, vocab); ``rows`` selects and orders the cache rows
# (indices into the previous call's rows) before the step.
StepFn = Callable[[np.ndarray, np.ndarray | None], np.ndarray]


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, EOS excluded
    score: float  # sum of log-probs (EOS included when generated)
    normalized: float  # score / length penalty


def length_limits(src_lengths: list[int], max_positions: int, max_length: int | None = None) -> list[int]:
    cap = max_positions - 1
    return [min(max_length if max_length is not None else 2 * n + 10, cap) for n in src_lengths]


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


def greedy_search(step: StepFn, limits: list[int], bos: int, eos: int) -> list[Hypothesis]:
    n = len(limits)
    active = np.arange(n)
    last = np.full((n, 1), bos, dtype=np.int64)
    scores = np.zeros(n, dtype=np.float64)
    tokens: list[list[int]] = [[] for _ in range(n)]
    ended_with_eos = np.zeros(n, dtype=bool)
    rows: np.ndarray | None = None
    for t in range(max(limits)):
        log_probs = step(last, rows)  # (active, vocab)
        best = log_probs.argmax(axis=-1)
        scores[active] += log_probs[np.arange(len(active)), best].astype(np.float64)
        is_eos = best == eos
        for i, sentence in enumerate(active):
            if is_eos[i]:
                ended_with_eos[sentence] = True
            else:
                tokens[sentence].append(int(best[i]))
        limit_reached = np.array([t + 1 >= limits[s] for s in active], dtype=bool)
        keep = ~(is_eos | limit_reached)
        if not keep.any():
            break
        rows = np.flatnonzero(keep)
        active, last = active[keep], best[keep].reshape(-1, 1).astype(np.int64)
    return [Hypothesis(tokens[i], float(scores[i]), float(scores[i])) for i in range(n)]


def _top_candidates(scores: np.ndarray, count: int) -> np.ndarray:
    """Indices of the ``count`` largest entries per row, largest first (ties: lower index first)."""
    part = np.argpartition(-scores, count - 1, axis=1)[:, :count]
    picked = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -picked), axis=1)
    return np.take_along_axis(part, order, axis=1)


def beam_search(
    step: StepFn,
    limits: list[int],
    bos: int,
    eos: int,
    beam_size: int,
    alpha: float,
    n_best: int,
) -> list[list[Hypothesis]]:
    """``step`` rows start as each sentence repeated ``beam_size`` times (sentence-major)."""
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be in 1..beam_size ({beam_size}), got {n_best}")
    n, k = len(limits), beam_size
    finished: list[list[Hypothesis]] = [[] for _ in range(n)]
    active = list(range(n))  # sentence ids of the live rows, k rows each
    beam_scores = np.zeros((n, k), dtype=np.float64)
    beam_scores[:, 1:] = -np.inf  # identical start beams: keep one alive
    history = np.full((n * k, 0), bos, dtype=np.int64)  # generated tokens of each live row
    last = np.full((n * k, 1), bos, dtype=np.int64)
    rows: np.ndarray | None = None
    for t in range(max(limits)):
        log_probs = step(last, rows).astype(np.float64)  # (active*k, vocab)
        vocab = log_probs.shape[1]
        candidates = (beam_scores.reshape(-1, 1) + log_probs).reshape(len(active), k * vocab)
        top = _top_candidates(candidates, 2 * k)
        top_scores = np.take_along_axis(candidates, top, axis=1)
        next_rows, next_tokens, next_scores, still = [], [], [], []
        for i, sentence in enumerate(active):
            chosen = []
            for rank in range(2 * k):
                beam, token = divmod(int(top[i, rank]), vocab)
                row, score = i * k + beam, float(top_scores[i, rank])
                if token == eos:
                    if rank < k:
                        seq = history[row].tolist()
                        finished[sentence].append(Hypothesis(seq, score, score / length_penalty(t + 1, alpha)))
                    continue
                chosen.append((row, token, score))
                if len(chosen) == k:
                    break
            if len(finished[sentence]) >= k:
                continue
            if t + 1 >= limits[sentence]:
                for row, token, score in chosen:
                    seq = history[row].tolist() + [token]
                    finished[sentence].append(Hypothesis(seq, score, score / length_penalty(len(seq), alpha)))
                continue
            still.append(sentence)
            for row, token, score in chosen:
                next_rows.append(row)
                next_tokens.append(token)
                next_scores.append(score)
        if not still:
            break
        rows = np.asarray(next_rows, dtype=np.int64)
        last = np.asarray(next_tokens, dtype=np.int64).reshape(-1, 1)
        history = np.concatenate([history[rows], last], axis=1)
        beam_scores = np.asarray(next_scores, dtype=np.float64).reshape(len(still), k)
        active = still
    return [sorted(f, key=lambda h: -h.normalized)[:n_best] for f in finished]
