"""Search over a step's top candidates (what decoder_step.onnx returns) equals search over full log-probabilities.

Pure numpy: a fake decoder whose log-probabilities depend on the step, the row's history and a seed, with
deliberate ties, so candidate ranking, tie-breaking (lower id first), EOS handling and length limits are
all exercised without a model.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.search import beam_search, greedy_search, top_candidates

VOCAB, EOS, BOS = 50, 2, 1


class FakeDecoder:
    """Deterministic log-probs per (history, step); ``rows`` reorders the histories like a KV cache."""

    def __init__(self, n_rows: int, seed: int, top: int | None = None) -> None:
        self.histories: list[tuple[int, ...]] = [()] * n_rows
        self.seed, self.top = seed, top

    def log_probs(self, history: tuple[int, ...]) -> np.ndarray:
        rng = np.random.default_rng(hash((self.seed, history)) % (1 << 32))
        logits = np.round(rng.normal(size=VOCAB), 1).astype(np.float32)  # rounding makes ties
        logits[EOS] += 0.4 * len(history)  # sentences end eventually
        return (logits - np.log(np.exp(logits.astype(np.float64)).sum())).astype(np.float32)

    def step(self, tokens: np.ndarray, rows: np.ndarray | None):
        if rows is not None:
            self.histories = [self.histories[r] for r in rows]
        self.histories = [h + (int(t),) for h, t in zip(self.histories, tokens[:, 0], strict=True)]
        out = np.stack([self.log_probs(h) for h in self.histories])
        return top_candidates(out, self.top) if self.top else out


def test_top_candidates_are_the_best_ids_best_first_ties_to_the_lower_id():
    log_probs = np.array([[0.0, -1.0, -0.5, -0.5, -3.0], [-2.0, -2.0, -2.0, -1.0, -2.0]], dtype=np.float32)
    top = top_candidates(log_probs, 3)
    assert top.ids.tolist() == [[0, 2, 3], [3, 0, 1]]
    assert top.log_probs.tolist() == [[0.0, -0.5, -0.5], [-1.0, -2.0, -2.0]]
    assert top_candidates(log_probs, 1).ids.tolist() == [[0], [3]]


@pytest.mark.parametrize("seed", range(6))
def test_greedy_on_candidates_equals_greedy_on_log_probs(seed):
    limits = [5, 9, 12, 3]
    full = greedy_search(FakeDecoder(4, seed).step, limits, BOS, EOS)
    top = greedy_search(FakeDecoder(4, seed, top=1).step, limits, BOS, EOS)
    assert [(h.tokens, h.score) for h in full] == [(h.tokens, h.score) for h in top]
    assert all(len(h.tokens) <= lim for h, lim in zip(full, limits, strict=True))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("beam", [2, 4])
def test_beam_on_candidates_equals_beam_on_log_probs(seed, beam):
    limits = [6, 10, 4]
    rows = len(limits) * beam
    full = beam_search(FakeDecoder(rows, seed).step, limits, BOS, EOS, beam, 0.6, beam)
    top = beam_search(FakeDecoder(rows, seed, top=2 * beam).step, limits, BOS, EOS, beam, 0.6, beam)
    assert [[(h.tokens, h.score) for h in nbest] for nbest in full] == [
        [(h.tokens, h.score) for h in nbest] for nbest in top
    ]
    assert all(len(nbest) == beam for nbest in full)


def test_beam_candidates_must_cover_two_beams_of_tokens():
    """Fewer than 2 * beam candidates per row would change results: the step must return at least that many."""
    step = FakeDecoder(4, 0, top=2).step
    with pytest.raises(ValueError, match="2 \\* beam"):
        beam_search(step, [5], BOS, EOS, 4, 0.6, 1)


@pytest.mark.parametrize("top", [None, 1])
def test_greedy_alone_takes_the_scalar_path_and_equals_greedy_in_a_batch(top):
    """One sentence runs greedy_search's scalar path; its result must be that sentence's result in a batch
    (EOS, length limits and tied maxima included)."""
    limits = [3, 7, 12, 30]
    ended = {"limit": 0, "eos": 0}
    for seed in range(8):
        batched = greedy_search(FakeDecoder(len(limits), seed, top).step, limits, BOS, EOS)
        alone = [greedy_search(FakeDecoder(1, seed, top).step, [lim], BOS, EOS)[0] for lim in limits]
        assert [(h.tokens, h.score) for h in alone] == [(h.tokens, h.score) for h in batched], seed
        for h, lim in zip(alone, limits, strict=True):
            ended["limit" if len(h.tokens) == lim else "eos"] += 1
    assert ended["limit"] and ended["eos"], ended  # both ways of ending were exercised


@pytest.mark.parametrize("top", [None, "2k"])
@pytest.mark.parametrize("beam", [2, 4])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_alone_takes_the_scalar_path_and_equals_beam_in_a_batch(top, beam, alpha):
    """One sentence runs beam_search's scalar path; its n-best list must be that sentence's n-best list in a batch
    (ranking ties, EOS among and beyond the k best, length limits, float64 sums and normalized scores)."""
    limits = [1, 3, 7, 12, 30]
    count = 2 * beam if top else None
    ended = {"limit": 0, "eos": 0}
    for seed in range(6):
        batched = beam_search(FakeDecoder(len(limits) * beam, seed, count).step, limits, BOS, EOS, beam, alpha, beam)
        alone = [
            beam_search(FakeDecoder(beam, seed, count).step, [lim], BOS, EOS, beam, alpha, beam)[0] for lim in limits
        ]
        as_tuples = [[(h.tokens, h.score, h.normalized) for h in nbest] for nbest in alone]
        assert as_tuples == [[(h.tokens, h.score, h.normalized) for h in nbest] for nbest in batched], seed
        for nbest, lim in zip(alone, limits, strict=True):
            assert len(nbest) == beam
            for h in nbest:
                ended["limit" if len(h.tokens) == lim else "eos"] += 1
    assert ended["limit"] and ended["eos"], ended
