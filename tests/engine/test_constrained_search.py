"""Lexically constrained beam search (engine/constrained.py): on a scripted decoder and on the tiny bundle."""

from __future__ import annotations

import numpy as np
import pytest

from core.bundle import load_bundle
from engine.constrained import Constraint, constrained_beam_search, constrained_beam_size
from engine.decoding import TranslateOptions
from engine.engine import Engine

BOS, EOS, VOCAB = 1, 2, 12


def scripted_step(preferred: list[int]):
    """A decoder that prefers ``preferred`` (position by position, then EOS) and gives every other token a low,
    position-independent log-probability; rows follow ``rows`` as a real cache would."""
    lengths = np.zeros(0, dtype=np.int64)

    def step(tokens: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        nonlocal lengths
        if len(lengths) != len(tokens):
            lengths = np.zeros(len(tokens), dtype=np.int64)
        elif rows is not None:
            lengths = lengths[rows]
        out = np.full((len(tokens), VOCAB), -8.0, dtype=np.float32)
        for r, n in enumerate(lengths.tolist()):
            out[r, preferred[n] if n < len(preferred) else EOS] = -0.1
        lengths = lengths + 1
        return out

    return step


def search(preferred, constraints, k=3, limit=12, n_best=1):
    return constrained_beam_search(scripted_step(preferred), [limit], BOS, EOS, k, 0.6, n_best, [constraints])[0]


def contains(tokens: list[int], seq: tuple[int, ...]) -> bool:
    return any(tuple(tokens[i : i + len(seq)]) == seq for i in range(len(tokens) - len(seq) + 1))


def test_without_constraints_it_follows_the_model():
    [best] = search([5, 6, 7], [])
    assert best.tokens == [5, 6, 7]


def test_a_term_the_model_would_not_produce_is_placed():
    [best] = search([5, 6, 7], [Constraint(((9, 10),))])
    assert contains(best.tokens, (9, 10))
    [free] = search([5, 6, 7], [])
    assert best.score < free.score  # the term costs the model something: it was forced, not chosen


def test_several_constraints_and_alternatives():
    cons = [Constraint(((9,), (11,))), Constraint(((3, 4),))]
    [best] = search([5, 6, 7], cons, k=4)
    assert (9 in best.tokens or 11 in best.tokens) and contains(best.tokens, (3, 4))


def test_a_constraint_the_model_already_produces_costs_nothing():
    [free] = search([5, 6, 7], [])
    [bound] = search([5, 6, 7], [Constraint(((6,),))])
    assert bound.tokens == free.tokens and bound.score == pytest.approx(free.score)


def test_n_best_hypotheses_all_hold_the_constraint():
    hyps = search([5, 6, 7], [Constraint(((9,),))], k=4, n_best=3)
    assert len(hyps) == 3 and all(9 in h.tokens for h in hyps)
    assert [h.normalized for h in hyps] == sorted((h.normalized for h in hyps), reverse=True)


def test_too_short_a_limit_ends_without_the_term_rather_than_never():
    # a 3-token constraint needs room; the limit grows by it, so even a tiny limit fits it
    [best] = search([5, 6, 7], [Constraint(((9, 10, 11),))], limit=1)
    assert contains(best.tokens, (9, 10, 11))


def test_beam_grows_to_hold_one_hypothesis_per_bank():
    cons = [[Constraint(((1,),))] * 3, []]
    assert constrained_beam_size(1, cons) == 4
    assert constrained_beam_size(6, cons) == 6
    assert constrained_beam_size(1, [[], []]) == 1


@pytest.fixture(scope="module")
def engine(tiny_bundle_dir):
    return Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu")


@pytest.mark.parametrize("beam", [1, 4])
def test_engine_places_terms_and_leaves_free_sentences_alone(engine, beam):
    options = TranslateOptions(beam_size=beam)
    texts = ["der hund spielt im park", "die katze sitzt auf dem ball"]
    free = engine.translate(texts, options)
    term = tuple(engine.tokenizer.encode("hound"))
    out = engine.translate(texts, options, [[Constraint((term,))], []])
    assert "hound" not in free[0].text.lower() and "hound" in out[0].text.lower()
    assert out[1].text == free[1].text and out[1].token_ids == free[1].token_ids


def test_engine_n_best_with_constraints(engine):
    term = tuple(engine.tokenizer.encode("hound"))
    [out] = engine.translate(
        ["der hund spielt"], TranslateOptions(beam_size=4, num_hypotheses=3), [[Constraint((term,))]]
    )
    assert len(out.hypotheses) == 3 and all("hound" in text.lower() for text, _, _ in out.hypotheses)


def test_a_completed_term_is_not_glued_to_a_word_piece():
    after = np.ones(VOCAB, dtype=bool)
    after[7] = False  # say 7 continues a word
    [glued] = search([9, 7, 6], [Constraint(((9,),))])
    [[best]] = constrained_beam_search(
        scripted_step([9, 7, 6]), [12], BOS, EOS, 3, 0.6, 1, [[Constraint(((9,),))]], None, after
    )
    assert glued.tokens[:2] == [9, 7]
    assert 9 in best.tokens and best.tokens[best.tokens.index(9) + 1 :][:1] != [7]


def random_step(seed: int):
    """A decoder whose log-probabilities are a fixed random function of each row's tokens so far (rows follow
    ``rows`` as a real cache would), so that every path through the search sees the same model."""
    histories: list[tuple[int, ...]] = []

    def step(tokens: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        nonlocal histories
        if rows is not None:
            histories = [histories[r] for r in rows.tolist()]
        elif len(histories) != len(tokens):
            histories = [() for _ in tokens]
        histories = [(*h, int(t)) for h, t in zip(histories, tokens[:, 0].tolist(), strict=True)]
        out = np.empty((len(tokens), VOCAB), dtype=np.float32)
        for r, h in enumerate(histories):
            logits = np.random.default_rng([seed, *h]).normal(0, 2, VOCAB)
            logits[EOS] += len(h) - 4  # EOS grows likelier with length
            out[r] = logits - np.log(np.exp(logits).sum())
        return out

    return step


@pytest.mark.parametrize("seed", range(6))
def test_one_sentence_and_a_batch_choose_the_same(seed):
    # the one-sentence path (Python scalars) and the batched numpy ranking must agree, also with a longer
    # alternative of a term in progress and tokens barred after a term
    rng = np.random.default_rng(seed)
    cons = [Constraint(((int(rng.integers(3, VOCAB)),), tuple(int(x) for x in rng.integers(3, VOCAB, 3))))]
    if seed % 2:
        cons.append(Constraint((tuple(int(x) for x in rng.integers(3, VOCAB, 2)),)))
    after = rng.random(VOCAB) > 0.3
    after[EOS] = True
    k = constrained_beam_size(1 + seed % 4, [cons])
    args = (BOS, EOS, k, 0.6, min(2, k))
    [one] = constrained_beam_search(random_step(seed), [8], *args, [cons], None, after)
    batch = constrained_beam_search(random_step(seed), [8, 6], *args, [cons, cons[:1]], None, after)
    assert [(h.tokens, h.score) for h in one] == [(h.tokens, h.score) for h in batch[0]]


@pytest.mark.parametrize("seed", [229, 242, 266])
def test_eos_ends_among_the_best_of_the_full_bank_not_of_all(seed):
    # seeds where a 4-token alternative in progress outranked hypotheses that could end (when its bank counted
    # all its tokens): EOS must count among the k best of the full bank only, on both paths
    rng = np.random.default_rng(seed)
    term = int(rng.integers(3, VOCAB))
    cons = [Constraint(((term,), tuple(int(x) for x in rng.integers(3, VOCAB, 4))))]
    args = (BOS, EOS, 2 + seed % 3, 0.6, 1)
    [[one]] = constrained_beam_search(random_step(seed), [8], *args, [cons])
    [batch, _] = constrained_beam_search(random_step(seed), [8, 5], *args, [cons, cons])
    assert (one.tokens, one.score) == (batch[0].tokens, batch[0].score)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_longer_form_in_progress_does_not_outrank_the_term_placed(k):
    # a term as given (9, like '▁dog') and capitalised in more pieces (8 10 7 10, like '▁ D o g'), the long form's
    # first token likelier (-5 against -8, the long form's other tokens -8 too): a hypothesis half way through the
    # long form must not sit in a fuller bank than one that placed the short form, or it pushes that one out and
    # the search ends at its length limit without the term
    base = scripted_step([5, 6])

    def step(tokens, rows):
        out = base(tokens, rows)
        out[:, 8] = np.maximum(out[:, 8], -5.0)
        return out

    term = Constraint(((9,), (8, 10, 7, 10)))
    for limits in ([4], [4, 4]):
        hyps = constrained_beam_search(step, limits, BOS, EOS, k, 0.6, 1, [[term]] * len(limits))
        for [best] in hyps:
            assert contains(best.tokens, (9,)) or contains(best.tokens, (8, 10, 7, 10)), best.tokens
