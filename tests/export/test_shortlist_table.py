"""The lexical shortlist's table (export/shortlist.py, core/shortlist.py): IBM Model 1 finds the word translations of
a tiny corpus, the file round-trips, and a batch's subset is the union it should be."""

from __future__ import annotations

import numpy as np
import pytest

from core.shortlist import Shortlist, load_shortlist, union
from core.tokenizer import SPECIAL_IDS
from export.shortlist import ibm1, learn_shortlist

# ids 4..9 "source words", 10..15 their translations (s -> s + 6); 16 a target word with no source (an article)
VOCAB = 20


def corpus(n: int = 300, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    rng = np.random.default_rng(seed)
    sources, targets = [], []
    for _ in range(n):
        src = [int(x) for x in rng.integers(4, 10, rng.integers(1, 6))]
        tgt = [16] + [s + 6 for s in src]
        sources.append(src)
        targets.append(tgt)
    return sources, targets


def test_ibm1_learns_the_word_translations():
    sources, targets = corpus()
    keys, prob = ibm1(sources, targets, VOCAB, iterations=8)
    table = dict(zip(keys.tolist(), prob.tolist(), strict=True))
    for s in range(4, 10):
        row = {k % VOCAB: p for k, p in table.items() if k // VOCAB == s}
        assert max(row, key=row.get) == s + 6
        assert row[s + 6] > 0.6
    null = {k % VOCAB: p for k, p in table.items() if k // VOCAB == VOCAB}
    assert max(null, key=null.get) == 16  # the word without a source is the NULL word's


def test_learned_shortlist_keeps_the_best_translations_first():
    sources, targets = corpus()
    shortlist = learn_shortlist(sources, targets, VOCAB, top_n=2, min_prob=0.05, frequent=1, iterations=8)
    assert shortlist.frequent.tolist() == [16]  # the most frequent target subword (in every sentence)
    for s in range(4, 10):
        assert shortlist.targets_of(s)[0] == s + 6
        assert len(shortlist.targets_of(s)) <= 2
    assert len(shortlist.targets_of(0)) == 0 and len(shortlist.targets_of(19)) == 0  # never seen as a source


def test_vocab_ids_of_a_batch():
    shortlist = Shortlist(
        frequent=np.array([16, 12]), offsets=np.array([0] * 5 + [1, 3] + [3] * 14), targets=np.array([11, 13, 19])
    )
    got = shortlist.vocab_ids([[4, 5], [6, 2]], extra=[7])
    want = sorted({16, 12, 11, 13, 19, 7, *SPECIAL_IDS.values()})  # 4 has none, 5 -> 11, 6 -> 13 19, 2 (EOS) none
    assert got.tolist() == want and got.dtype == np.int64


def test_vocab_ids_are_the_union_of_the_translations_of_every_subword_of_the_batch():
    rng = np.random.default_rng(3)
    vocab = 300
    counts = rng.integers(0, 6, vocab)  # some subwords have no translation
    offsets = np.concatenate([[0], np.cumsum(counts)])
    shortlist = Shortlist(rng.integers(0, vocab, 12), offsets, rng.integers(0, vocab, int(offsets[-1])))
    for _ in range(50):
        batch = [rng.integers(-3, vocab + 3, rng.integers(0, 9)).tolist() for _ in range(rng.integers(1, 5))]
        want = {*shortlist.frequent.tolist(), *SPECIAL_IDS.values()}
        for s in (t for src in batch for t in src if 0 <= t < vocab):  # ids outside the vocabulary are ignored
            want |= set(shortlist.targets_of(s).tolist())
        got = shortlist.vocab_ids(batch)
        assert got.tolist() == sorted(want) and got.dtype == np.int64
    assert shortlist.vocab_ids([[]]).tolist() == sorted({*shortlist.frequent.tolist(), *SPECIAL_IDS.values()})


def test_union_of_several_sentences_lists():
    rng = np.random.default_rng(5)
    lists = [np.unique(rng.integers(0, 50, rng.integers(0, 20))) for _ in range(6)]
    got = union(lists, 50)
    assert got.tolist() == np.unique(np.concatenate(lists)).tolist() and got.dtype == np.int64
    assert union([], 50).tolist() == [] and union([np.array([49, 0])], 50).tolist() == [0, 49]


def test_file_round_trip_and_refusal(tmp_path):
    sources, targets = corpus()
    shortlist = learn_shortlist(sources, targets, VOCAB, top_n=3, frequent=2)
    path = shortlist.save(tmp_path / "shortlist.npz")
    back = load_shortlist(path, VOCAB)
    for name in ("frequent", "offsets", "targets"):
        assert np.array_equal(getattr(back, name), getattr(shortlist, name))
    assert back.targets.dtype == np.uint16  # compact: a 20-id vocabulary fits
    with pytest.raises(ValueError, match="not a shortlist"):
        load_shortlist(path, VOCAB + 1)
    Shortlist(np.array([VOCAB]), shortlist.offsets, shortlist.targets).save(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="not a shortlist"):
        load_shortlist(tmp_path / "bad.npz", VOCAB)  # an id outside the vocabulary


def test_owners_are_each_sources_own_list_within_the_union():
    """Shortlist.owners (the fused step's vocab_sources): row i says which of the batch's union ids source i's own
    list (vocab_ids of it alone) holds; sources with repeated, unknown and no subwords too."""
    rng = np.random.default_rng(4)
    vocab = 60
    counts = rng.integers(0, 5, vocab)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    shortlist = Shortlist(np.array([7, 30], np.uint16), offsets, rng.integers(4, vocab, offsets[-1]).astype(np.uint16))
    sources = [[5, 9, 9, 2], [vocab + 3, 11], [], [40, 41, 42, 43, 44, 45, 2]]
    union_ids = shortlist.vocab_ids(sources)
    got = shortlist.owners(sources, union_ids)
    assert got.shape == (len(sources), len(union_ids)) and got.dtype == bool
    for i, source in enumerate(sources):
        np.testing.assert_array_equal(got[i], np.isin(union_ids, shortlist.vocab_ids([source])))
    assert not got.all(axis=0).all()  # the sources own different ids
