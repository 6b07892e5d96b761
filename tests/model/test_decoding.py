"""A tiny model learns to reverse sequences; greedy and beam search decode it."""

from __future__ import annotations

import pytest
import torch
from model_toys import EOS, PAD, TOY_VOCAB, tiny_config, toy_batch, toy_pairs

from core.search import length_divisor
from model.decoding import beam_search, greedy_search
from model.transformer import Transformer


@pytest.fixture(scope="module")
def held_out():
    pairs = toy_pairs(60, "reverse", torch.Generator().manual_seed(12345))
    src, _, _ = toy_batch(pairs)
    return src, [t for _, t in pairs]


def _exact(hyp_tokens, targets) -> float:
    return sum(h == t for h, t in zip(hyp_tokens, targets, strict=True)) / len(targets)


def test_greedy_search_reverses(reverse_model, held_out):
    src, targets = held_out
    hyps = greedy_search(reverse_model, src)
    assert _exact([h.tokens for h in hyps], targets) >= 0.9
    for h in hyps:
        assert EOS not in h.tokens and PAD not in h.tokens
        assert h.score <= 0.0 and h.normalized == h.score


def test_beam_search_reverses(reverse_model, held_out):
    src, targets = held_out
    nbest = beam_search(reverse_model, src, beam_size=4)
    assert all(len(n) == 1 for n in nbest)
    assert _exact([n[0].tokens for n in nbest], targets) >= 0.9


def test_greedy_equals_beam_of_one(reverse_model, held_out):
    src, _ = held_out
    greedy = greedy_search(reverse_model, src)
    beam = beam_search(reverse_model, src, beam_size=1, length_penalty=0.0)
    assert [g.tokens for g in greedy] == [b[0].tokens for b in beam]
    for g, b in zip(greedy, beam, strict=True):
        assert b[0].score == pytest.approx(g.score, abs=1e-4)


def test_beam_n_best_is_sorted_distinct_and_the_best_is_the_one_best(reverse_model, held_out):
    src, _ = held_out
    src = src[:10]
    nbest = beam_search(reverse_model, src, beam_size=4, n_best=3)
    one_best = beam_search(reverse_model, src, beam_size=4, n_best=1)
    for hyps, best in zip(nbest, one_best, strict=True):
        assert len(hyps) == 3
        normalized = [h.normalized for h in hyps]
        assert normalized == sorted(normalized, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 3
        assert hyps[0].tokens == best[0].tokens
        for h in hyps:  # normalized = score / ((5 + length) / 6) ** length_penalty, length counting EOS
            assert h.normalized == pytest.approx(h.score / length_divisor(len(h.tokens) + 1, 0.6))
    with pytest.raises(ValueError):
        beam_search(reverse_model, src, beam_size=2, n_best=3)


def test_decoding_a_sentence_alone_or_in_a_padded_batch_gives_the_same_tokens(reverse_model, held_out):
    src, _ = held_out
    batch_greedy = greedy_search(reverse_model, src[:6])
    batch_beam = beam_search(reverse_model, src[:6], beam_size=3)
    for i in range(6):
        row = src[i : i + 1, : int((src[i] != PAD).sum())]
        assert greedy_search(reverse_model, row)[0].tokens == batch_greedy[i].tokens
        assert beam_search(reverse_model, row, beam_size=3)[0][0].tokens == batch_beam[i][0].tokens


def test_an_untrained_model_stops_at_the_length_limit():
    torch.manual_seed(3)
    model = Transformer(tiny_config(max_positions=16)).eval()
    src = torch.tensor([[5, 6, EOS]])
    for max_length in (1, 4):
        assert len(greedy_search(model, src, max_length)[0].tokens) <= max_length
        for h in beam_search(model, src, beam_size=3, max_length=max_length, n_best=3)[0]:
            assert len(h.tokens) <= max_length
            assert all(0 <= t < TOY_VOCAB for t in h.tokens)
    # Without max_length: at most 2 * source length + 10, capped at max_positions - 1.
    assert len(greedy_search(model, src)[0].tokens) <= 2 * 3 + 10
    long_src = torch.tensor([[5, 6, 7, 8, 9, 10, EOS]])
    assert len(greedy_search(model, long_src)[0].tokens) <= 15
    assert all(len(h.tokens) <= 15 for h in beam_search(model, long_src, beam_size=2, n_best=2)[0])
