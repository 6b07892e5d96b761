"""The model's own word for a term's source words, banned from its sentence's constrained search
(engine/own_words.py; issue 55: "The dog is sleeping hound.")."""

from __future__ import annotations

import numpy as np

from engine.constrained import Constraint
from engine.own_words import banned_per_sentence, banning, own_word_ids
from engine.search import TopCandidates

VOCAB = {"dog": [5], "Dog": [6], "hound": [7], "Hound": [8], "big": [9], "dogs": [5, 3], "the dog": [1, 5]}


def encode(text: str) -> list[int]:
    return VOCAB.get(text, [2, 3, 4])


def test_a_one_word_one_subword_own_translation_in_its_case_forms():
    assert own_word_ids("dog.", encode) == {5, 6}
    assert own_word_ids("Dog", encode) == {5, 6}
    assert own_word_ids("the dog", encode) == set()  # several words: nothing
    assert own_word_ids("dogs", encode) == set()  # several subwords: its first would ban every word starting so
    assert own_word_ids("", encode) == set()
    assert own_word_ids("The", lambda text: [1]) == set()  # a function word: never banned


def test_each_sentence_bans_its_terms_own_words_but_never_a_terms_start():
    hound = Constraint(((7,), (8,)), "Hund")
    big_dog = Constraint(((9,), (5,)), "groß")  # a term that starts with the other term's own word
    span = Constraint(((4,),))  # a span to copy: no source words
    own = {"Hund": {5, 6}, "groß": {9}}
    banned = banned_per_sentence([[hound], [span], [hound, big_dog]], own)
    assert set(banned) == {0, 2}
    assert banned[0].tolist() == [5, 6] and banned[2].tolist() == [6]


def test_banning_masks_the_rows_of_the_banned_sentences_only():
    full = np.log(np.full((3, 10), 0.1, dtype=np.float32))
    top = TopCandidates(full[:, :4].copy(), np.tile(np.arange(4, 8), (3, 1)), full)
    sources = np.array([0, 1, 1])  # row -> sentence
    step = banning(lambda tokens, rows: top, lambda: sources, {1: np.array([5])})
    out = step(np.zeros((3, 1), dtype=np.int64), None)
    assert np.isfinite(out.full[0]).all() and np.isneginf(out.full[1:, 5]).all()
    assert np.isneginf(out.log_probs[1:, 1]).all() and np.isfinite(out.log_probs[0]).all()  # id 5 at column 1
    assert np.isfinite(top.full).all()  # the step's own arrays are not changed
    plain = banning(lambda tokens, rows: full, lambda: sources, {0: np.array([2, 3])})(None, None)
    assert np.isneginf(plain[0, [2, 3]]).all() and np.isfinite(plain[1:]).all()
    assert banning(step, lambda: sources, {}) is step
