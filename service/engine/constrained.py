"""Lexically constrained beam search: every hypothesis that ends holds each constraint's target tokens.

A *constraint* is one or more alternative token sequences (a glossary term as given and capitalised, a span that
must be copied); it is met when the hypothesis contains one of them, contiguous. The search is Post and Vilar's
(2018) dynamic beam allocation over our numpy beam search (service/engine/search.py):

- each beam's candidates are its 2 * k best tokens plus, for every constraint it has not met, the next token of
  that constraint (the first token, or the next one of a constraint it is in the middle of);
- a candidate's *bank* is how many constraint tokens its hypothesis has produced (tokens of constraints met, plus
  the tokens of the one in progress); leaving a constraint in the middle drops its partial tokens;
- the k places of a sentence go to the banks in turn, fullest bank first, each taking its best candidate, so a
  hypothesis that has placed its terms is never pushed out by freer ones, and vice versa;
- EOS ends a hypothesis only when every constraint is met (and none is half placed): the EOS candidates among the
  k best of the full bank end; the sentence is done when k hypotheses ended or at its length limit, which grows by
  the constraints' tokens. At the limit with nothing ended, the live hypotheses of the fullest bank end as they
  are: the caller sees which terms are missing (the serving layer warns ``glossary_term_missing``).

Scores are summed as search.py sums them (float32 log-probabilities in float64) and ranked with the same length
penalty. Rows are sentence-major, k per sentence, like beam_search, so the step function is the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from core.search import Hypothesis
from service.engine.search import StepFn, TopCandidates, top_candidates

MAX_CONSTRAINED_BEAM = 8


@dataclass(frozen=True)
class Constraint:
    """Target token sequences, any one of which satisfies the constraint (non-empty, each non-empty)."""

    alternatives: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.alternatives or not all(self.alternatives):
            raise ValueError("a constraint needs at least one non-empty token sequence")

    @property
    def size(self) -> int:
        """Tokens it adds to a hypothesis's bank when met (its shortest alternative)."""
        return min(len(a) for a in self.alternatives)


@dataclass(frozen=True)
class _State:
    """What a hypothesis has placed: constraints met and the one in progress (its index and tokens so far)."""

    met: frozenset[int] = frozenset()
    doing: int = -1
    prefix: tuple[int, ...] = ()
    just_met: bool = False  # its last token completed a constraint: the next one must end the word

    def bank(self, constraints: list[Constraint]) -> int:
        return sum(constraints[c].size for c in self.met) + len(self.prefix)

    def complete(self, constraints: list[Constraint]) -> bool:
        return len(self.met) == len(constraints) and self.doing < 0

    def wanted(self, constraints: list[Constraint]) -> set[int]:
        """Tokens that advance a constraint from here."""
        if self.doing >= 0:
            n = len(self.prefix)
            return {
                a[n] for a in constraints[self.doing].alternatives if len(a) > n and a[:n] == self.prefix
            } | self._starts(constraints)
        return self._starts(constraints)

    def _starts(self, constraints: list[Constraint]) -> set[int]:
        return {a[0] for c, con in enumerate(constraints) if c not in self.met for a in con.alternatives}

    def advance(self, token: int, constraints: list[Constraint]) -> _State:
        if self.doing >= 0:
            prefix = (*self.prefix, token)
            alternatives = constraints[self.doing].alternatives
            if prefix in alternatives:
                return _State(self.met | {self.doing}, just_met=True)
            if any(a[: len(prefix)] == prefix for a in alternatives):
                return _State(self.met, self.doing, prefix)
        for c, con in enumerate(constraints):  # not (or no longer) inside a constraint: does one start here?
            if c in self.met:
                continue
            if (token,) in con.alternatives:
                return _State(self.met | {c}, just_met=True)
            if any(a[0] == token for a in con.alternatives):
                return _State(self.met, c, (token,))
        return _State(self.met) if self.doing >= 0 or self.just_met else self


def constrained_beam_size(beam_size: int, constraints: list[list[Constraint]]) -> int:
    """The beam a batch of constrained sentences runs with: room for one hypothesis per bank of constraints met
    (Post and Vilar: a beam smaller than the constraints plus one starves the banks), at most MAX_CONSTRAINED_BEAM
    unless the asked beam is larger."""
    most = max((len(c) for c in constraints), default=0)
    return max(beam_size, min(most + 1, MAX_CONSTRAINED_BEAM), 2 if most else 1)


@dataclass
class _Sentence:
    constraints: list[Constraint]
    limit: int
    alpha: float
    scores: list[float]
    states: list[_State]
    history: list[list[int]]
    finished: list[Hypothesis]
    complete: list[bool]  # per finished hypothesis: whether it met every constraint


def constrained_beam_search(
    step: StepFn,
    limits: list[int],
    bos: int,
    eos: int,
    beam_size: int,
    alpha: float,
    n_best: int,
    constraints: list[list[Constraint]],
    max_limit: int | None = None,
    after_term: np.ndarray | None = None,
) -> list[list[Hypothesis]]:
    """n-best hypotheses of each sentence (best first), each sentence with ``beam_size`` rows (sentence-major, as
    beam_search) and its ``constraints``. A sentence's length limit grows by its constraints' longest alternatives
    (never beyond ``max_limit``). ``step`` must give full (rows, vocab) log-probabilities. ``after_term`` (vocab,)
    bool: the tokens that may follow a completed constraint (those that begin a word, punctuation, EOS, an
    inflection suffix), so that a term is never glued to the start of another word; None: any token."""
    k = beam_size
    if not 1 <= n_best <= k:
        raise ValueError(f"n_best must be in 1..beam_size ({k}), got {n_best}")
    sentences = []
    for limit, cons in zip(limits, constraints, strict=True):
        extra = sum(max(len(a) for a in c.alternatives) for c in cons)
        grown = limit + extra if max_limit is None else min(limit + extra, max_limit)
        start = [0.0] + [-math.inf] * (k - 1)  # identical start beams: keep one alive
        sentences.append(_Sentence(cons, grown, alpha, start, [_State()] * k, [[] for _ in range(k)], [], []))
    active = list(range(len(sentences)))
    last = np.full((len(sentences) * k, 1), bos, dtype=np.int64)
    rows: np.ndarray | None = None
    for t in range(max(s.limit for s in sentences)):
        out = step(last, rows)
        if isinstance(out, TopCandidates):
            raise ValueError("constrained search needs the decoder's full log-probabilities")
        if after_term is not None:
            ended = [p * k + b for p, i in enumerate(active) for b in range(k) if sentences[i].states[b].just_met]
            if ended:
                out = out.copy()
                out[np.ix_(ended, np.flatnonzero(~after_term))] = -np.inf
        top = top_candidates(out, min(2 * k, out.shape[1]))
        top_ids, top_lps = top.ids.tolist(), top.log_probs.tolist()
        next_rows, next_tokens, still = [], [], []
        for place, i in enumerate(active):
            s = sentences[i]
            chosen = _choose(s, out, top_ids, top_lps, place * k, k, eos, t)
            if chosen is None:
                continue
            still.append(i)
            next_rows.extend(place * k + beam for beam, _ in chosen)
            next_tokens.extend(token for _, token in chosen)
        if not still:
            break
        active = still
        rows = np.asarray(next_rows, dtype=np.int64)
        last = np.asarray(next_tokens, dtype=np.int64).reshape(-1, 1)
    out_hyps = []
    for s in sentences:
        ranked = sorted(zip(s.finished, s.complete, strict=True), key=lambda p: (not p[1], -p[0].normalized))
        out_hyps.append([h for h, _ in ranked[:n_best]] or [Hypothesis([], -math.inf, -math.inf)])
    return out_hyps


def _choose(
    s: _Sentence,
    log_probs: np.ndarray,
    top_ids: list[list[int]],
    top_lps: list[list[float]],
    first_row: int,
    k: int,
    eos: int,
    t: int,
) -> list[tuple[int, int]] | None:
    """One step of one sentence: record the hypotheses that end and return the k continuing (beam, token) pairs,
    or None when the sentence is done."""
    cons = s.constraints
    # candidates: (score, beam, token, state); a beam's best tokens plus the tokens that advance its constraints
    candidates: dict[tuple[int, int], tuple[float, _State]] = {}
    for beam in range(k):
        base = s.scores[beam]
        if base == -math.inf:
            continue
        row = first_row + beam
        state = s.states[beam]
        tokens = dict(zip(top_ids[row], top_lps[row], strict=True))
        for token in state.wanted(cons):
            if token not in tokens:
                tokens[token] = float(log_probs[row, token])
        for token, lp in tokens.items():
            if token == eos and not state.complete(cons):
                continue  # a hypothesis ends only with every constraint placed
            new = state if token == eos else state.advance(token, cons)
            candidates[(beam, token)] = (base + lp, new)
    full = sum(c.size for c in cons)
    by_bank: dict[int, list[tuple[float, int, int, _State]]] = {}
    for (beam, token), (score, new) in candidates.items():
        bank = new.bank(cons)
        by_bank.setdefault(bank, []).append((score, beam, token, new))
    for bank in by_bank.values():
        bank.sort(key=lambda c: (-c[0], c[1], c[2]))  # score, then beam, then token (search.rank's order)
    # EOS among the k best of the full bank ends a hypothesis (as in search.rank)
    complete_bank = by_bank.get(full, [])
    for score, beam, token, _ in complete_bank[:k]:
        if token == eos:
            s.finished.append(Hypothesis.beam(list(s.history[beam]), score, t + 1, s.alpha))
            s.complete.append(True)
    if full in by_bank:
        by_bank[full] = [c for c in complete_bank if c[2] != eos]
    if sum(s.complete) >= k:
        return None
    chosen = _allocate(by_bank, k)
    if not chosen:
        return None
    if t + 1 >= s.limit:  # length limit: the live hypotheses end as they are, the fullest ones first
        for score, beam, token, new in chosen:
            seq = [*s.history[beam], token]
            s.finished.append(Hypothesis.beam(seq, score, len(seq), s.alpha))
            s.complete.append(new.complete(cons))
        return None
    s.history = [[*s.history[beam], token] for _, beam, token, _ in chosen]
    s.scores = [score for score, _, _, _ in chosen] + [-math.inf] * (k - len(chosen))
    s.states = [new for _, _, _, new in chosen] + [_State()] * (k - len(chosen))
    s.history += [[] for _ in range(k - len(chosen))]
    pairs = [(beam, token) for _, beam, token, _ in chosen]
    return pairs + [pairs[0]] * (k - len(pairs))  # padding rows repeat the best one; their scores stay -inf


def _allocate(by_bank: dict[int, list[tuple[float, int, int, _State]]], k: int) -> list[tuple[float, int, int, _State]]:
    """Dynamic beam allocation: the banks take turns, fullest first, each giving its best remaining candidate,
    until k are chosen (a bank with no candidates left gives its turn to the others). Best score first."""
    queues = [list(by_bank[b]) for b in sorted(by_bank, reverse=True) if by_bank[b]]
    chosen: list[tuple[float, int, int, _State]] = []
    while len(chosen) < k and any(queues):
        for queue in queues:
            if queue and len(chosen) < k:
                chosen.append(queue.pop(0))
    return sorted(chosen, key=lambda c: (-c[0], c[1], c[2]))
