"""Lexically constrained beam search: every hypothesis that ends holds each constraint's target tokens.

A *constraint* is one or more alternative token sequences (a glossary term as given and capitalised, a span that
must be copied); it is met when the hypothesis contains one of them, contiguous. The search is Post and Vilar's
(2018) dynamic beam allocation over our numpy beam search (engine/search.py):

- each beam's candidates are its 2 * k best tokens plus, for every constraint it has not met, the next token of
  that constraint (the first token, or the next one of a constraint it is in the middle of);
- a candidate's *bank* is how many constraint tokens its hypothesis has produced (the shortest alternative of each
  constraint met, plus the tokens of the one in progress, short of its shortest alternative, so that a longer
  alternative half placed never outranks a term placed); leaving a constraint in the middle drops its partial
  tokens;
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
from engine.search import StepFn, TopCandidates, top_candidates

MAX_CONSTRAINED_BEAM = 8


@dataclass(frozen=True)
class Constraint:
    """Target token sequences, any one of which satisfies the constraint (non-empty, each non-empty)."""

    alternatives: tuple[tuple[int, ...], ...]
    # the source words a glossary term translates, as found in the sentence ("" for a span to copy): the engine keeps
    # the model's own word for them out of the sentence, so the term takes its place (Engine.own_words)
    source: str = ""

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
        """Constraint tokens placed: a met constraint counts its shortest alternative; one in progress counts its
        tokens so far, short of that size, so a longer alternative in progress (a capitalised term cut into more
        pieces) never sits in a fuller bank than the term placed, and the full bank holds only the complete."""
        placed = sum(constraints[c].size for c in self.met)
        if self.doing >= 0:
            placed += min(len(self.prefix), constraints[self.doing].size - 1)
        return placed

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


class _Memo:
    """One sentence's constraints and its state transitions, memoised: a hypothesis's state changes only on a
    constraint token (or when it leaves one in progress), so each (state, token) is worked out once per request."""

    def __init__(self, constraints: list[Constraint]) -> None:
        self.constraints = constraints
        self.tokens = sorted({token for c in constraints for a in c.alternatives for token in a})
        self.token_set = frozenset(self.tokens)
        self.full = sum(c.size for c in constraints)
        self._moves: dict[tuple[_State, int], _State] = {}
        self._facts: dict[_State, tuple[int, int, bool, frozenset[int]]] = {}

    def advance(self, state: _State, token: int) -> _State:
        key = (state, token)
        new = self._moves.get(key)
        if new is None:
            new = self._moves[key] = state.advance(token, self.constraints)
        return new

    def facts(self, state: _State) -> tuple[int, int, bool, frozenset[int]]:
        """(bank, bank after a token outside every constraint, complete, wanted tokens) of a state."""
        out = self._facts.get(state)
        if out is None:
            cons = self.constraints
            plain = sum(cons[c].size for c in state.met)
            out = self._facts[state] = (state.bank(cons), plain, state.complete(cons), frozenset(state.wanted(cons)))
        return out

    def plain(self, state: _State) -> _State:
        """The state after a token outside every constraint (a partial constraint is dropped)."""
        return _State(state.met) if state.doing >= 0 or state.just_met else state


def grown_limits(limits: list[int], constraints: list[list[Constraint]], max_limit: int | None) -> list[int]:
    """Each sentence's length limit grown by its constraints' longest alternatives (never beyond ``max_limit``)."""
    grown = []
    for limit, cons in zip(limits, constraints, strict=True):
        extra = sum(max(len(a) for a in c.alternatives) for c in cons)
        grown.append(limit + extra if max_limit is None else min(limit + extra, max_limit))
    return grown


def _constraint_ids(memos: list[_Memo]) -> np.ndarray:
    """(sentences, width) each sentence's constraint tokens, -1 padded."""
    width = max((len(m.tokens) for m in memos), default=0) or 1
    con_ids = np.full((len(memos), width), -1, dtype=np.int64)
    for i, m in enumerate(memos):
        con_ids[i, : len(m.tokens)] = m.tokens
    return con_ids


def _banked(top, active, con_ids, all_memos, just, after_term, scores, eos, row_states, facts):
    """Each row's candidates (its 2k best tokens, then its sentence's constraint tokens read from the full
    log-probabilities) with their log-probabilities, banks and validity: (ids, lps, bank, valid), (rows, c) each."""
    top_ids, top_lps, full = top
    k = scores.shape[1]
    ext_ids = np.repeat(con_ids[active], k, axis=0)  # (m*k, width): the constraint tokens of each row's sentence
    memos = [all_memos[i] for i in active.tolist()]
    ext_lps = np.take_along_axis(full, np.maximum(ext_ids, 0), axis=1).astype(np.float64)
    if after_term is not None and just.any():
        ext_lps[just] = np.where(after_term[np.maximum(ext_ids[just], 0)], ext_lps[just], -np.inf)
    ids = np.concatenate([top_ids, ext_ids], axis=1)  # (m*k, c)
    lps = np.concatenate([top_lps.astype(np.float64), ext_lps], axis=1)
    in_top = (ext_ids[:, :, None] == top_ids[:, None, :]).any(axis=2)
    is_con = (ids[:, :, None] == ext_ids[:, None, :]).any(axis=2) & (ids >= 0)
    rows = len(row_states)
    plain_bank = np.fromiter((f[1] for f in facts), dtype=np.int64, count=rows)
    complete = np.fromiter((f[2] for f in facts), dtype=bool, count=rows)
    bank = np.repeat(plain_bank[:, None], ids.shape[1], axis=1)
    valid = np.isfinite(lps) & np.isfinite(scores.reshape(-1))[:, None]
    valid[:, 2 * k :] &= (ext_ids >= 0) & ~in_top  # a constraint token already among the best counts once
    valid &= (ids != eos) | complete[:, None]  # a hypothesis ends only with every constraint placed
    for r, j in zip(*np.nonzero(is_con & valid), strict=True):
        memo, st = memos[r // k], row_states[r]
        token = int(ids[r, j])
        if j >= 2 * k and token not in facts[r][3]:
            valid[r, j] = False  # only the constraint tokens that advance this row are extra candidates
            continue
        bank[r, j] = memo.facts(memo.advance(st, token))[0]
    return ids, lps, bank, valid


def _ended(chosen, hist, row_states, memo, length_penalty) -> list[tuple[Hypothesis, bool]]:
    """Hypotheses ended at the length limit as they are: (row, token, score) each; whether each placed every
    constraint."""
    out = []
    for row, token, score in chosen:
        seq = [*hist[row], token]
        new = memo.advance(row_states[row], token)
        out.append((Hypothesis.beam(seq, score, len(seq), length_penalty), new.complete(memo.constraints)))
    return out


def _next_states(memo, row_states, picked, rows, ids) -> list[_State]:
    """A sentence's k constraint states after a step: each kept place's row advanced by its token (a fresh state for
    an unfilled place)."""
    out = []
    for keep, row, token in zip(picked.tolist(), rows.tolist(), ids.tolist(), strict=True):
        if not keep:
            out.append(_State())
            continue
        st = row_states[row]
        out.append(memo.advance(st, token) if token in memo.token_set else memo.plain(st))
    return out


def _in_banks(total, ids, bank, valid, offsets, k: int):
    """Each sentence's candidates (m, k * c) sorted by (bank, score, beam, token), invalid ones last (bank -1):
    (total, ids, bank, valid, row) each sorted."""
    m, width = total.shape
    flat_ids, flat_bank, flat_valid = ids.reshape(m, width), bank.reshape(m, width), valid.reshape(m, width)
    key_bank = np.where(flat_valid, flat_bank, -1)
    order = np.lexsort((offsets + np.maximum(flat_ids, 0), -total, -key_bank), axis=1)
    sentence = np.arange(m)[:, None]
    c = width // k
    return (
        total[sentence, order], flat_ids[sentence, order], key_bank[sentence, order], flat_valid[sentence, order],
        sentence * k + order // c,
    )  # fmt: skip


def _bank_starts(s_bank: np.ndarray) -> np.ndarray:
    """For each sorted candidate, the place where its bank begins (the banks are contiguous, fullest first; the full
    bank is the fullest: State.bank)."""
    starts = np.ones_like(s_bank, dtype=bool)
    starts[:, 1:] = s_bank[:, 1:] != s_bank[:, :-1]
    return np.maximum.accumulate(np.where(starts, np.arange(s_bank.shape[1])[None, :], 0), axis=1)


def _rank_in_bank(s_valid: np.ndarray, first: np.ndarray) -> np.ndarray:
    """A candidate's rank in its bank: the valid ones before it there."""
    before = np.cumsum(s_valid, axis=1) - s_valid
    return before - np.take_along_axis(before, first, axis=1)


def _allocate(s_total, s_rows, s_ids, s_bank, s_valid, in_bank, k: int):
    """Dynamic beam allocation: round r gives each bank's r-th best, fullest bank first; the first k are kept, best
    first (score, beam, token), the unfilled places last. (total, rows, ids, picked), (m, k) each."""
    turn = np.lexsort((-s_bank, np.where(s_valid, in_bank, s_valid.shape[1])), axis=1)[:, :k]
    picked = np.take_along_axis(s_valid, turn, axis=1)
    p_total = np.where(picked, np.take_along_axis(s_total, turn, axis=1), -np.inf)
    p_rows, p_ids = np.take_along_axis(s_rows, turn, axis=1), np.take_along_axis(s_ids, turn, axis=1)
    best = np.lexsort(((p_rows % k) * (1 << 32) + np.maximum(p_ids, 0), -p_total, ~picked), axis=1)
    p_total, p_rows, p_ids = (np.take_along_axis(a, best, axis=1) for a in (p_total, p_rows, p_ids))
    return p_total, p_rows, p_ids, np.take_along_axis(picked, best, axis=1)


def _row_facts(memos: list[_Memo], states: list[list[_State]], active: np.ndarray):
    """The live rows' constraint states, their facts (_Memo.facts) and which just met a constraint."""
    row_states = [st for i in active.tolist() for st in states[i]]
    facts = [memos[i].facts(st) for i in active.tolist() for st in states[i]]
    just = np.fromiter((st.just_met for st in row_states), dtype=bool, count=len(row_states))
    return row_states, facts, just


def constrained_beam_search(
    step: StepFn,
    limits: list[int],
    bos: int,
    eos: int,
    beam_size: int,
    length_penalty: float,
    n_best: int,
    constraints: list[list[Constraint]],
    max_limit: int | None = None,
    after_term: np.ndarray | None = None,
) -> list[list[Hypothesis]]:
    """n-best hypotheses of each sentence (best first), each sentence with ``beam_size`` rows (sentence-major, as
    beam_search) and its ``constraints``. A sentence's length limit grows by its constraints' longest alternatives
    (never beyond ``max_limit``). ``step`` gives full (rows, vocab) log-probabilities, or TopCandidates holding at
    least the 2k best tokens of each row together with the full log-probabilities (``full``), from which only the
    constraint tokens are read. ``after_term`` (vocab,) bool: the tokens that may follow a completed constraint
    (those that begin a word, punctuation, EOS, an inflection suffix), so that a term is never glued to the start
    of another word; None: any token.

    One step ranks every live sentence at once in numpy (as search.rank does): each row's candidates are its 2k
    best tokens and its sentence's constraint tokens (those that advance the row's state), each with its bank; a
    sort by (bank, score, beam, token) gives each candidate its rank in its bank, and dynamic beam allocation (the
    banks take turns, fullest first) is the order (rank in bank, fullest bank first). Python is left with the
    state transitions on constraint tokens (memoised) and the k chosen states of each sentence."""
    k = beam_size
    if not 1 <= n_best <= k:
        raise ValueError(f"n_best must be in 1..beam_size ({k}), got {n_best}")
    n = len(limits)
    memos = [_Memo(list(c)) for c in constraints]
    grown = grown_limits(limits, constraints, max_limit)
    if n == 1:
        return [_search_one(step, grown[0], bos, eos, k, length_penalty, n_best, memos[0], after_term)]
    limit = np.asarray(grown)
    con_ids = _constraint_ids(memos)  # each sentence's constraint tokens, -1 padded
    c = 2 * k + con_ids.shape[1]  # candidates per row
    offsets = np.repeat(np.arange(k, dtype=np.int64), c)[None, :] * (1 << 32)  # beam before token, as search.rank
    finished: list[list[tuple[Hypothesis, bool]]] = [[] for _ in range(n)]
    n_complete, states, active = np.zeros(n, dtype=np.int64), [[_State()] * k for _ in range(n)], np.arange(n)
    scores = np.full((n, k), -np.inf)
    scores[:, 0] = 0.0  # identical start beams: keep one alive
    history, last = np.zeros((n * k, 0), dtype=np.int64), np.full((n * k, 1), bos, dtype=np.int64)
    rows: np.ndarray | None = None
    for t in range(int(limit.max())):
        out = step(last, rows)
        row_states, facts, just = _row_facts(memos, states, active)
        top = _candidates(out, k, just if after_term is not None else None, after_term)
        ids, lps, bank, valid = _banked(top, active, con_ids, memos, just, after_term, scores, eos, row_states, facts)
        total = (scores.reshape(-1)[:, None] + lps).reshape(len(active), k * c)
        s_total, s_ids, s_bank, s_valid, s_rows = _in_banks(total, ids, bank, valid, offsets, k)
        first = _bank_starts(s_bank)
        in_bank = _rank_in_bank(s_valid, first)
        is_eos = s_valid & (s_ids == eos)  # only in the full bank
        full_bank = np.asarray([memos[i].full for i in active.tolist()])[:, None]
        ends = is_eos & (in_bank < k) & (s_bank == full_bank)  # EOS among the k best of the full bank
        hist = history.tolist() if ends.any() else None
        for p, j in zip(*np.nonzero(ends), strict=True):  # complete: every constraint placed
            finished[int(active[p])].append((Hypothesis.beam(hist[s_rows[p, j]], float(s_total[p, j]), t + 1,
                                                             length_penalty), True))  # fmt: skip
        n_complete[active] += ends.sum(axis=1)
        s_valid &= ~is_eos  # the others continue, ranked again in their banks without them
        in_bank = _rank_in_bank(s_valid, first)
        p_total, p_rows, p_ids, picked = _allocate(s_total, s_rows, s_ids, s_bank, s_valid, in_bank, k)
        counts = picked.sum(axis=1)
        done = (n_complete[active] >= k) | (counts == 0)
        at_limit = ~done & (t + 1 >= limit[active])
        for p in np.flatnonzero(at_limit).tolist():  # length limit: the live hypotheses end as they are
            hist = history.tolist() if hist is None else hist
            chosen = [(int(p_rows[p, j]), int(p_ids[p, j]), float(p_total[p, j])) for j in range(int(counts[p]))]
            finished[int(active[p])] += _ended(chosen, hist, row_states, memos[int(active[p])], length_penalty)
        still = ~(done | at_limit)
        if not still.any():
            break
        # padding places repeat the sentence's best one; their scores stay -inf
        p_rows, p_ids = np.where(picked, p_rows, p_rows[:, :1]), np.where(picked, p_ids, p_ids[:, :1])
        for p in np.flatnonzero(still).tolist():
            states[int(active[p])] = _next_states(memos[int(active[p])], row_states, picked[p], p_rows[p], p_ids[p])
        rows, last = p_rows[still].reshape(-1), p_ids[still].reshape(-1, 1)
        history, scores, active = np.concatenate([history[rows], last], axis=1), p_total[still], active[still]
    return [_n_best(f, n_best) for f in finished]


def _n_best(finished: list[tuple[Hypothesis, bool]], n_best: int) -> list[Hypothesis]:
    """A sentence's n best ended hypotheses, those with every constraint placed first."""
    ranked = sorted(finished, key=lambda p: (not p[1], -p[0].normalized))
    return [h for h, _ in ranked[:n_best]] or [Hypothesis([], -math.inf, -math.inf)]


def _search_one(
    step: StepFn,
    limit: int,
    bos: int,
    eos: int,
    k: int,
    length_penalty: float,
    n_best: int,
    memo: _Memo,
    after_term: np.ndarray | None,
) -> list[Hypothesis]:
    """constrained_beam_search for one sentence in Python scalars (its numpy ranking costs more than a 2-row
    decoder step when there is one sentence, as in search._beam_one): the same candidates, banks and choices."""
    finished: list[tuple[Hypothesis, bool]] = []
    n_complete = 0
    scores = [0.0] + [-math.inf] * (k - 1)  # identical start beams: keep one alive
    states = [_State()] * k
    history: list[list[int]] = [[] for _ in range(k)]
    last = np.full((k, 1), bos, dtype=np.int64)
    rows: np.ndarray | None = None
    full_bank = -memo.full
    for t in range(limit):
        out = step(last, rows)
        just = np.asarray([st.just_met for st in states]) if after_term is not None else None
        top_ids, top_lps, full = _candidates(out, k, just, after_term)
        ids, lps = top_ids.tolist(), top_lps.tolist()
        candidates = []  # (-bank, -score, beam, token): fullest bank first, then best score, beam, token
        for beam in range(k):
            base = scores[beam]
            if base == -math.inf:
                continue
            st = states[beam]
            _, plain, complete, wanted = memo.facts(st)
            row = dict(zip(ids[beam], lps[beam], strict=True))
            for token in wanted:
                if token not in row and not (st.just_met and after_term is not None and not after_term[token]):
                    row[token] = float(full[beam, token])
            for token, lp in row.items():
                if lp == -math.inf or (token == eos and not complete):
                    continue  # a hypothesis ends only with every constraint placed
                bank = memo.facts(memo.advance(st, token))[0] if token in memo.token_set else plain
                candidates.append((-bank, -(base + lp), beam, token))
        candidates.sort()
        # EOS among the k best of the full bank
        for _, negative, beam, token in [c for c in candidates if c[0] == full_bank][:k]:
            if token == eos:
                finished.append((Hypothesis.beam(history[beam][:], -negative, t + 1, length_penalty), True))
                n_complete += 1
        if n_complete >= k:
            break
        rank: dict[int, int] = {}
        turns = []
        for negative_bank, negative, beam, token in candidates:
            if token != eos:
                turn = rank.get(negative_bank, 0)
                rank[negative_bank] = turn + 1
                turns.append((turn, negative_bank, negative, beam, token))
        turns.sort()  # dynamic beam allocation: round by round, fullest bank first
        chosen = sorted((negative, beam, token) for _, _, negative, beam, token in turns[:k])
        if not chosen:
            break
        if t + 1 >= limit:  # length limit: the live hypotheses end as they are
            for negative, beam, token in chosen:
                seq = [*history[beam], token]
                complete = memo.advance(states[beam], token).complete(memo.constraints)
                finished.append((Hypothesis.beam(seq, -negative, len(seq), length_penalty), complete))
            break
        chosen += [chosen[0]] * (k - len(chosen))  # padding places repeat the best one; their scores stay -inf
        live = len(turns[:k])
        history = [[*history[beam], token] for _, beam, token in chosen]
        states = [
            (memo.advance(states[beam], token) if token in memo.token_set else memo.plain(states[beam]))
            if j < live
            else _State()
            for j, (_, beam, token) in enumerate(chosen)
        ]
        scores = [-negative if j < live else -math.inf for j, (negative, _, _) in enumerate(chosen)]
        rows = np.asarray([beam for _, beam, _ in chosen], dtype=np.int64)
        last = np.asarray([token for _, _, token in chosen], dtype=np.int64).reshape(k, 1)
    return _n_best(finished, n_best)


def _candidates(
    out: np.ndarray | TopCandidates, k: int, just: np.ndarray | None, after_term: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, log-probs) of the 2k best tokens of each row and the rows' full log-probabilities. Rows whose
    hypothesis just completed a constraint (``just``) rank only the tokens ``after_term`` allows."""
    if isinstance(out, TopCandidates):
        if out.full is None:
            raise ValueError("constrained search needs the decoder's full log-probabilities")
        full = out.full
        top_ids, top_lps = out.ids[:, : 2 * k], out.log_probs[:, : 2 * k]
        if top_ids.shape[1] < 2 * k:
            top = top_candidates(full, min(2 * k, full.shape[1]))
            top_ids, top_lps = top.ids, top.log_probs
    else:
        full = out
        top = top_candidates(full, min(2 * k, full.shape[1]))
        top_ids, top_lps = top.ids, top.log_probs
    if just is not None and just.any():
        masked = np.where(after_term[None, :], full[just], -np.inf).astype(full.dtype)
        top = top_candidates(masked, top_ids.shape[1])
        top_ids, top_lps = top_ids.copy(), top_lps.copy()
        top_ids[just], top_lps[just] = top.ids, top.log_probs
    return top_ids, top_lps, full
