"""Constrained greedy search: one decoder row per sentence places each constraint where the model nearly says it.

The constrained beam search (constrained.py) keeps a hypothesis per bank of constraints met, so a greedy sentence
with one term runs two decoder rows and reorders their cache at every step. This search keeps greedy's single row
(its cache is gathered only when a sentence leaves the batch, as in greedy_search):

- at each step the row takes the model's best token, except that
- a constraint in progress is finished: its next token is forced (the alternative that matches the tokens so far;
  of several, the likelier next token);
- an unmet constraint starts where its first token is among the ``top_k`` best tokens of the step (the model
  nearly says it, typically in place of its own translation of the source term), the likeliest such first token
  first;
- EOS is refused while a constraint is unmet; right after a constraint only ``after_term`` tokens may follow (no
  word piece glued to the term), as in the beam search.

A sentence whose model wants to end while a constraint is unmet that never came among the top_k is *stuck*. With
``fallback`` it stops there and is returned with a *plan*: for each constraint, the step where its first token came
closest to the step's best token (smallest log-probability gap). A second pass with that plan repeats the same
tokens up to there (greedy is deterministic) and starts the constraint at that step. Without ``fallback`` (or when
a planned start is no longer free) the sentence goes on with EOS refused, and a constraint is forced once the
tokens left before the length limit are just enough for what is unmet: the term comes late rather than never.
The engine runs the two passes and hands what a second pass still leaves stuck to the constrained beam search.
Scores sum float32 log-probabilities in float64, as greedy does. Attention is not used: the step graphs that
search runs on do not output it, and a step of the attention graph (decoder.onnx) costs a full decode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.search import Hypothesis
from engine.constrained import Constraint
from engine.search import StepFn, TopCandidates, going_on

GREEDY_TERM_TOP_K = 3


@dataclass
class _Row:
    """One sentence's constraints and what its row has placed."""

    constraints: list[Constraint]
    unmet: set[int]
    doing: int = -1  # the constraint in progress
    prefix: tuple[int, ...] = ()
    just_met: bool = False
    stuck: bool = False
    plan: dict[int, int] | None = None  # constraint -> the step to start it at (a second pass)
    spots: dict[int, tuple[float, int]] | None = None  # constraint -> (gap to the best token, step) of its best spot

    def needed(self) -> int:
        """Tokens still needed to complete every constraint (shortest alternatives)."""
        need = sum(self.constraints[c].size for c in self.unmet if c != self.doing)
        if self.doing >= 0:
            n = len(self.prefix)
            need += min(len(a) - n for a in self.constraints[self.doing].alternatives if a[:n] == self.prefix)
        return need

    def others(self, c: int) -> int:
        """Tokens the unmet constraints other than ``c`` still need (shortest alternatives)."""
        return sum(self.constraints[o].size for o in self.unmet if o != c)

    def forced(self, lp: np.ndarray, room: int) -> int:
        """The next token of the constraint in progress (the likelier one where alternatives part, among those that
        still fit in the ``room`` tokens left with the other unmet constraints' needs, if any do)."""
        n = len(self.prefix)
        going = [a for a in self.constraints[self.doing].alternatives if len(a) > n and a[:n] == self.prefix]
        fitting = [a for a in going if len(a) - n + self.others(self.doing) <= room] or going
        return max(sorted({a[n] for a in fitting}), key=lambda t: lp[t])

    def starts(self, room: int) -> list[tuple[int, int]]:
        """(token, constraint) of the first tokens of every unmet constraint's alternatives that fit in the ``room``
        tokens left with the other unmet constraints' needs: a longer alternative (a capitalised term cut into more
        pieces) is not begun where only the shorter one can end."""
        return [
            (a[0], c)
            for c in sorted(self.unmet)
            for a in self.constraints[c].alternatives
            if len(a) + self.others(c) <= room
        ]

    def advance(self, token: int) -> None:
        """The row emitted ``token``: a constraint in progress goes on or completes."""
        self.just_met = False
        if self.doing >= 0:
            prefix = (*self.prefix, token)
            alternatives = self.constraints[self.doing].alternatives
            if prefix in alternatives:
                self.unmet.discard(self.doing)
                self.doing, self.prefix, self.just_met = -1, (), True
                return
            self.prefix = prefix  # forced tokens always follow an alternative
            return
        for c in sorted(self.unmet):
            alternatives = self.constraints[c].alternatives
            if (token,) in alternatives:
                self.unmet.discard(c)
                self.just_met = True
                return
            if any(a[0] == token for a in alternatives):
                self.doing, self.prefix = c, (token,)
                return


def _row_token(
    row: _Row, lp: np.ndarray, t: int, room: int, eos: int, after_term: np.ndarray | None, top_k: int
) -> tuple[int, bool]:
    """A bound row's token at step ``t`` (``room``: tokens left, this one included) from its log-probabilities
    ``lp``: the constraint it is writing, a constraint's start (planned here, among the ``top_k`` best, or late), or
    the model's best; and whether the row is stuck (it wanted EOS with a constraint unmet and none could start)."""
    if row.just_met and after_term is not None:
        lp = np.where(after_term, lp, -np.inf)
    if row.unmet:
        lp = lp.copy() if not (row.just_met and after_term is not None) else lp
        wanted_eos = int(lp.argmax()) == eos
        lp[eos] = -np.inf  # EOS is refused while a constraint is unmet
    else:
        wanted_eos = False
    if row.doing >= 0:
        return row.forced(lp, room), False
    token = int(lp.argmax())
    if not row.unmet:
        return token, False
    starts = [(s, c) for s, c in row.starts(room) if np.isfinite(lp[s])]
    if not starts:
        return token, False
    values = lp[[s for s, _ in starts]]
    first = int(np.argmax(values))
    planned = [j for j, (_, c) in enumerate(starts) if row.plan and row.plan.get(c) == t]
    if not wanted_eos:
        top = lp[token]
        for (_, c), v in zip(starts, values.tolist(), strict=True):
            gap = float(top - v)
            if c not in row.spots or gap < row.spots[c][0]:
                row.spots[c] = (gap, t)
    near = int(np.count_nonzero(lp > values[first])) < top_k  # among the top_k best
    late = row.needed() >= room
    if planned:
        return starts[max(planned, key=lambda j: values[j])][0], False
    if near or late:
        return starts[first][0], False
    return token, wanted_eos


def constrained_greedy_search(
    step: StepFn,
    limits: list[int],
    bos: int,
    eos: int,
    constraints: list[list[Constraint]],
    max_limit: int | None = None,
    after_term: np.ndarray | None = None,
    top_k: int = GREEDY_TERM_TOP_K,
    fallback: bool = False,
    plans: list[dict[int, int] | None] | None = None,
) -> tuple[list[Hypothesis], dict[int, dict[int, int]]]:
    """The greedy hypothesis of each sentence with its ``constraints`` placed (module docstring), and the indices of
    the sentences that got stuck (``fallback``: they stop there, their hypothesis is to be replaced by the caller).
    ``step`` gives full (rows, vocab) log-probabilities or TopCandidates with ``full``. A sentence's length limit
    grows by its constraints' longest alternatives (never beyond ``max_limit``), as in the beam search."""
    n = len(limits)
    plans = plans or [None] * n
    rows_state = [_Row(list(c), set(range(len(c))), plan=p, spots={}) for c, p in zip(constraints, plans, strict=True)]
    grown = []
    for limit, cons in zip(limits, constraints, strict=True):
        extra = sum(max(len(a) for a in c.alternatives) for c in cons)
        grown.append(limit + extra if max_limit is None else min(limit + extra, max_limit))
    limit = np.asarray(grown)
    active = np.arange(n)
    last = np.full((n, 1), bos, dtype=np.int64)
    scores = np.zeros(n, dtype=np.float64)
    tokens: list[list[int]] = [[] for _ in range(n)]
    stuck: list[int] = []
    rows: np.ndarray | None = None
    for t in range(int(limit.max()) if n else 0):
        out = step(last, rows)
        if isinstance(out, TopCandidates):
            if out.full is None:
                raise ValueError("constrained greedy search needs the decoder's full log-probabilities")
            out = out.full
        m = len(active)
        best = out.argmax(axis=1)
        keep = np.ones(m, dtype=bool)
        for r in range(m):
            i = int(active[r])
            row = rows_state[i]
            if not row.unmet and not row.just_met:
                continue  # free: the model's best token
            token, is_stuck = _row_token(row, out[r], t, int(limit[i]) - t, eos, after_term, top_k)
            if is_stuck:
                row.stuck = True
                if fallback:
                    stuck.append(i)
                    keep[r] = False
                    continue
            best[r] = token
        scores[active] += out[np.arange(m), best].astype(np.float64)
        is_eos = best == eos
        for r in np.flatnonzero(~is_eos & keep).tolist():
            i = int(active[r])
            token = int(best[r])
            tokens[i].append(token)
            row = rows_state[i]
            if row.unmet or row.just_met:
                row.advance(token)
        keep &= ~(is_eos | (t + 1 >= limit[active]))
        if not keep.any():
            break
        rows, active, last = going_on(keep, active, best)
    hyps = [Hypothesis(tokens[i], float(scores[i]), float(scores[i])) for i in range(n)]
    return hyps, {i: {c: step for c, (_, step) in rows_state[i].spots.items()} for i in sorted(stuck)}
