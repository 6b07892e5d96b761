"""Constrained greedy search (engine/constrained_greedy.py): one row per sentence, on a scripted decoder and
through the engine's greedy path on the tiny bundle."""

from __future__ import annotations

import numpy as np
import pytest

from core.bundle import load_bundle
from engine.constrained import Constraint
from engine.constrained_greedy import constrained_greedy_search
from engine.decoding import TranslateOptions
from engine.engine import Engine
from service.serving.terms import Terms, constraints, settle, warnings

BOS, EOS, VOCAB = 1, 2, 12
DISTRACTORS = (3, 4, 11)  # each step's 2nd to 4th best tokens: a token below them is not among the top 3


def scripted_step(preferred: list[int], near: dict[int, tuple[int, float]] | None = None, widths=None):
    """A decoder that prefers ``preferred`` (position by position, then EOS), ranks DISTRACTORS next and every
    other token low; ``near`` {position: (token, log-prob)} lifts a token at a position. Rows follow ``rows`` as a
    real cache would; ``widths`` collects the rows of every step."""
    lengths = np.zeros(0, dtype=np.int64)

    def step(tokens: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        nonlocal lengths
        if len(lengths) != len(tokens) and rows is None:
            lengths = np.zeros(len(tokens), dtype=np.int64)
        elif rows is not None:
            lengths = lengths[rows]
        if widths is not None:
            widths.append(len(tokens))
        out = np.full((len(tokens), VOCAB), -8.0, dtype=np.float32)
        out[:, list(DISTRACTORS)] = -2.0
        for r, n in enumerate(lengths.tolist()):
            out[r, preferred[n] if n < len(preferred) else EOS] = -0.1
            if near and n in near:
                token, lp = near[n]
                out[r, token] = lp
        lengths = lengths + 1
        return out

    return step


def greedy(step, constraints, limit=12, **kwargs):
    hyps, stuck = constrained_greedy_search(step, [limit], BOS, EOS, [constraints], **kwargs)
    return hyps[0], stuck


def test_a_term_is_placed_where_the_model_nearly_says_it_on_one_row():
    widths: list[int] = []
    best, stuck = greedy(scripted_step([5, 6, 7], {1: (9, -1.0)}, widths), [Constraint(((9, 10),))])
    assert best.tokens == [5, 9, 10] and not stuck  # 9 in place of 6, finished with 10, then the model's EOS
    assert set(widths) == {1}  # one decoder row, never a beam


def test_without_constraints_it_is_greedy():
    best, _ = greedy(scripted_step([5, 6, 7]), [])
    assert best.tokens == [5, 6, 7]


def test_eos_is_refused_until_the_term_is_met():
    # the model wants to end after 2 tokens; the term comes near only at position 4
    best, stuck = greedy(scripted_step([5, 6], {4: (9, -1.0)}), [Constraint(((9,),))])
    assert best.tokens == [5, 6, 3, 3, 9] and not stuck  # EOS refused twice (the next best token instead)


def test_without_fallback_a_term_that_never_comes_near_is_forced_before_the_limit():
    best, stuck = greedy(scripted_step([5, 6]), [Constraint(((9, 10),))], limit=6)
    assert not stuck
    assert len(best.tokens) == 8 and best.tokens[-2:] == [9, 10]  # the limit grew by the term: 6 + 2


def test_a_stuck_sentence_gets_a_plan_and_the_second_pass_follows_it():
    # 9 is never among the 3 best; it comes closest (log-prob -4 against -8 elsewhere) at position 1
    step = lambda: scripted_step([5, 6, 7], {1: (9, -4.0)})  # noqa: E731
    first, stuck = greedy(step(), [Constraint(((9,),))], fallback=True)
    assert stuck == {0: {0: 1}}  # sentence 0: its constraint 0 at step 1
    second, again = greedy(step(), [Constraint(((9,),))], fallback=True, plans=[stuck[0]])
    assert second.tokens == [5, 9, 7] and not again


def test_a_batch_chooses_as_each_sentence_alone():
    cons = [
        [Constraint(((9, 10),))],
        [],
        [
            Constraint(
                ((8,),),
            ),
            Constraint(((10,),)),
        ],
    ]
    limits = [12, 12, 12]
    near = {1: (9, -1.0), 2: (8, -1.5), 4: (10, -1.8)}
    widths: list[int] = []
    batch, _ = constrained_greedy_search(scripted_step([5, 6, 7], near, widths), limits, BOS, EOS, cons)
    alone = [constrained_greedy_search(scripted_step([5, 6, 7], near), [12], BOS, EOS, [c])[0][0] for c in cons]
    assert [(h.tokens, h.score) for h in batch] == [(h.tokens, h.score) for h in alone]
    assert max(widths) == 3  # one row per sentence


def test_a_term_that_cannot_be_placed_is_reported_missing():
    # the length limit (max_limit) leaves no room for a 3-token term: the hypothesis ends without it, and the
    # serving layer names the term in a glossary_term_missing warning
    best, _ = greedy(scripted_step([5, 6]), [Constraint(((9, 10, 11),))], limit=2, max_limit=2)
    assert best.tokens != [] and not any(best.tokens[i : i + 3] == [9, 10, 11] for i in range(len(best.tokens)))


@pytest.fixture(scope="module")
def engine(tiny_bundle_dir):
    return Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu")


def serve(engine, texts, terms):
    """Texts translated as the server does: the terms found, the engine's constrained search, settled."""
    uses = [terms.find(t, "de") for t in texts]
    cons = [constraints(u, engine.tokenizer.encode) for u in uses]
    out = engine.translate(texts, TranslateOptions(beam_size=1), cons)
    render = lambda s: engine.tokenizer.decode(engine.tokenizer.encode(s))  # noqa: E731
    return [settle(t, u, render) for t, u in zip(out, uses, strict=True)]


def test_engine_greedy_places_terms_and_copies_spans_exactly(engine):
    texts = ["der hund spielt im park", "die katze sitzt auf dem ball mit ThinkPad X1", "ein mann"]
    terms = Terms({"hund": "hound"}, ["ThinkPad X1"])
    out = serve(engine, texts, terms)
    assert "hound" in out[0].text.lower() and not out[0].missing
    assert "ThinkPad X1" in out[1].text and not out[1].missing
    assert out[2].text == engine.translate(["ein mann"], TranslateOptions())[0].text  # no term: plain greedy


def test_engine_greedy_reports_a_term_it_cannot_place(engine):
    # a target term longer than the decoder's positions cannot be placed: named in a warning, never dropped silently
    [out] = serve(engine, ["der hund"], Terms({"hund": "Q" + "-z8" * 40}))
    assert [w["code"] for w in warnings(out)] == ["glossary_term_missing"]


def two_forms_step():
    """The model says 5 6 and then wants EOS; of a term's two forms the long one's first token (8) is likelier
    than the short one (9) everywhere, and neither is ever among the 3 best."""
    base = scripted_step([5, 6])

    def step(tokens, rows):
        out = base(tokens, rows)
        out[:, 8], out[:, 9] = -5.0, -7.0
        return out

    return step


@pytest.mark.parametrize("limit, max_limit", [(4, None), (4, 6), (2, 4)])
def test_at_the_limit_the_form_that_fits_is_placed(limit, max_limit):
    # a term as given (9, like '▁dog') and capitalised in more pieces (8 10 7 10, like '▁ D o g'): forced at the
    # length limit, only the short form still fits, even though the long one's first token is likelier
    term = Constraint(((9,), (8, 10, 7, 10)))
    best, stuck = greedy(two_forms_step(), [term], limit=limit, max_limit=max_limit)
    assert best.tokens[-1] == 9 and 8 not in best.tokens and not stuck


def test_a_long_form_is_begun_where_it_fits():
    # with room for it, the likelier long form is placed as before
    term = Constraint(((9,), (8, 10, 7, 10)))
    best, _ = greedy(scripted_step([5, 6, 7], {1: (8, -1.0)}), [term])
    assert best.tokens[:5] == [5, 8, 10, 7, 10]


def test_a_constraint_in_progress_takes_the_branch_that_fits():
    # two forms that share a first token and part after it: the likelier branch (11) no longer fits at the limit
    term = Constraint(((8, 9), (8, 11, 10, 10)))
    best, _ = greedy(two_forms_step(), [term], limit=2, max_limit=4)
    assert best.tokens[-2:] == [8, 9]
