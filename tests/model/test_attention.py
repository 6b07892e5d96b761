"""Attention probabilities, padding masks and the causal mask."""

from __future__ import annotations

import math

import pytest
import torch
from model_toys import EOS, PAD, tiny_config

from model.attention import MultiHeadAttention, scaled_dot_product_attention
from model.transformer import Transformer, causal_mask


def test_attention_matches_the_formula_rows_sum_to_one_and_masked_entries_are_zero():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 8, generator=g) for _ in range(3))  # (batch, heads, len, d_k)
    mask = torch.rand(2, 1, 4, 4, generator=g) > 0.4
    mask[..., 0] = True  # every row keeps at least one key
    out, probs = scaled_dot_product_attention(q, k, v, mask)

    scores = (q @ k.transpose(-2, -1)) / math.sqrt(8)
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(probs, expected)
    torch.testing.assert_close(out, expected @ v)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3, 4))
    assert torch.all(probs.masked_select(~mask.expand_as(probs)) == 0.0)


def test_a_fully_masked_row_gets_zero_probabilities_and_zero_output():
    q, k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    out, probs = scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(probs[0, 0, 1] == 0.0)
    assert torch.all(out[0, 0, 1] == 0.0)
    torch.testing.assert_close(probs[0, 0, 0].sum(), torch.tensor(1.0))
    assert probs[0, 0, 0, 1] == 0.0


def test_multi_head_attention_ignores_padded_keys():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=16, n_heads=4)
    x = torch.randn(2, 5, 16)
    lengths = torch.tensor([5, 3])
    mask = (torch.arange(5) < lengths[:, None])[:, None, None, :]  # (batch, 1, 1, src)
    out, probs, _ = mha(x, mask)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 5))
    assert torch.all(probs[1, :, :, 3:] == 0.0)
    # Whatever sits in the padded positions does not reach the real ones.
    x2 = x.clone()
    x2[1, 3:] = torch.randn(2, 16) * 10
    out2, _, _ = mha(x2, mask)
    torch.testing.assert_close(out2[1, :3], out[1, :3])
    assert not torch.allclose(out2[1, 3:], out[1, 3:])


@pytest.mark.parametrize("positional", ["sinusoidal", "relative", "xl_relative"])
def test_encoder_and_cross_attention_give_padding_exactly_zero(positional):
    torch.manual_seed(0)
    model = Transformer(tiny_config(positional_encoding=positional)).eval()
    src = torch.tensor([[5, 6, 7, 8, EOS], [9, 10, EOS, PAD, PAD]])
    enc = model.encode(src)
    assert enc.src_mask.tolist() == (src != PAD).tolist()
    for probs in enc.attention:  # (batch, heads, src, src)
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))
        assert torch.all(probs[1, :, :, 3:] == 0.0)
        assert torch.all(probs[0] > 0.0)
    out = model.decode(torch.tensor([[1, 4], [1, 4]]), model.cross_kv(enc.memory), enc.src_mask)
    for probs in out.cross_attention:  # (batch, heads, tgt, src)
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))
        assert torch.all(probs[1, :, :, 3:] == 0.0)
    # Extra padding changes nothing for the real tokens.
    wider = torch.cat([src, torch.full((2, 3), PAD)], dim=1)
    enc_wide = model.encode(wider)
    torch.testing.assert_close(enc_wide.memory[1, :3], enc.memory[1, :3], atol=1e-5, rtol=1e-5)


def test_causal_mask_shape_and_content():
    assert causal_mask(3, 0).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # Two new queries after two cached positions see keys 0..2 and 0..3.
    assert causal_mask(2, 2).tolist() == [[True, True, True, False], [True, True, True, True]]


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "relative", "xl_relative"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_a_future_target_token_does_not_change_earlier_logits(positional, norm):
    torch.manual_seed(0)
    model = Transformer(tiny_config(positional_encoding=positional, norm_placement=norm)).eval()
    src = torch.tensor([[5, 6, 7, EOS], [8, 9, EOS, PAD]])
    tgt = torch.tensor([[1, 4, 5, 6, 7, 8], [1, 9, 10, 11, 12, 13]])
    changed_at = 3
    tgt2 = tgt.clone()
    tgt2[:, changed_at] = torch.tensor([13, 4])
    with torch.no_grad():
        logits, logits2 = model(src, tgt), model(src, tgt2)
        enc = model.encode(src)
        dec2 = model.decode(tgt2, model.cross_kv(enc.memory), enc.src_mask)
    torch.testing.assert_close(logits2[:, :changed_at], logits[:, :changed_at], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(logits2[:, changed_at], logits[:, changed_at], atol=1e-4)
    torch.testing.assert_close(dec2.logits, logits2)
    for probs in dec2.self_attention:  # (batch, heads, tgt, tgt): nothing above the diagonal
        assert torch.all(probs.triu(diagonal=1) == 0.0)
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))
