"""Sinusoidal table against the formula; relative distances clipped at k."""

from __future__ import annotations

import math

import pytest
import torch

from model.positional import LearnedPositions, RelativePositions, SinusoidalPositions, sinusoidal_table


@pytest.mark.parametrize("d_model", [8, 16])
def test_sinusoidal_table_equals_the_formula_at_known_positions(d_model):
    table = sinusoidal_table(60, d_model)
    assert table.shape == (60, d_model)
    for i in (0, 1, 2, 7, 59):
        for j in range(d_model // 2):
            angle = i / 10000 ** (2 * j / d_model)
            assert table[i, 2 * j].item() == pytest.approx(math.sin(angle), abs=1e-6), (i, 2 * j)
            assert table[i, 2 * j + 1].item() == pytest.approx(math.cos(angle), abs=1e-6), (i, 2 * j + 1)


def test_sinusoidal_known_values():
    table = sinusoidal_table(3, 4)
    # Position 1, d=4: angles 1 / 10000^0 = 1 and 1 / 10000^(2/4) = 0.01.
    expected = [math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)]
    assert table[1].tolist() == pytest.approx(expected, abs=1e-7)
    assert table[0].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_sinusoidal_halves_layout_holds_the_sines_then_the_cosines():
    """Marian's (and fairseq's) layout: column j the sine of frequency j, column d/2 + j its cosine."""
    table = sinusoidal_table(3, 4, layout="halves")
    assert table[1].tolist() == pytest.approx([math.sin(1.0), math.sin(0.01), math.cos(1.0), math.cos(0.01)], abs=1e-7)
    interleaved = sinusoidal_table(50, 16)
    torch.testing.assert_close(sinusoidal_table(50, 16, "halves"), interleaved[:, [*range(0, 16, 2), *range(1, 16, 2)]])


def test_sinusoidal_module_looks_up_rows_and_is_not_saved():
    module = SinusoidalPositions(10, 8)
    torch.testing.assert_close(module(torch.tensor([3, 5])), sinusoidal_table(10, 8)[[3, 5]])
    assert module.state_dict() == {}  # a fixed table: rebuilt from the config, not stored


def test_learned_positions_are_a_trainable_lookup():
    module = LearnedPositions(10, 8)
    assert module(torch.tensor([2])).requires_grad
    torch.testing.assert_close(module(torch.tensor([2, 4])), module.embedding.weight[[2, 4]])


def test_relative_distances_clip_at_k():
    rel = RelativePositions(max_distance=2, d_head=4)
    expected = [[max(-2, min(2, j - i)) for j in range(6)] for i in range(6)]
    assert rel.distances(6, 6).tolist() == expected
    # One new query at the end of 6 keys (incremental decoding) is the last row of the full matrix.
    assert rel.distances(1, 6).tolist() == [expected[5]]
    assert rel.distances(2, 6).tolist() == expected[4:]


def test_far_pairs_share_one_embedding_and_near_ones_do_not():
    torch.manual_seed(0)
    k = 2
    rel = RelativePositions(max_distance=k, d_head=4)
    rel_k, rel_v = rel(7, 7)  # (queries, keys, d_head)
    assert rel_k.shape == rel_v.shape == (7, 7, 4)
    for table, weights in ((rel_k, rel.keys.weight), (rel_v, rel.values.weight)):
        # Every pair at distance >= k (either side) uses the clipped vector for +k or -k.
        for i in range(7):
            for j in range(7):
                d = max(-k, min(k, j - i))
                assert torch.equal(table[i, j], weights[d + k])
        assert torch.equal(table[0, 2], table[0, 6])  # distance 2 and 6 -> both +k
        assert torch.equal(table[6, 0], table[3, 1])  # distance -6 and -2 -> both -k
        assert not torch.equal(table[0, 1], table[0, 2])  # distances 1 and 2 differ
        assert not torch.equal(table[0, 2], table[2, 0])  # +k and -k differ
