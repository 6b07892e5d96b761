"""The survey's attention variants: sparse (local/strided/global), linear (elu + 1 kernel), Transformer-XL positions.

Each one learns the toy reverse task, decodes incrementally exactly as the full pass computes, and returns the
attention it really used: zeros outside the pattern (sparse), the implied kernel weights (linear).
"""

from __future__ import annotations

import math

import pytest
import torch
from model_toys import EOS, PAD, tiny_config, toy_batch, toy_pairs, train_toy

from model.decoding import greedy_search
from model.linear_attention import EPS, causal_linear_attention, elu_feature_map, linear_attention
from model.positional import XLRelativePositions, sinusoids
from model.sparse_attention import SparsePattern
from model.transformer import Transformer

VARIANTS = {
    "sparse": dict(attention="sparse", sparse_window=1, sparse_stride=3, sparse_global=1),
    "linear": dict(attention="linear"),
    "xl_relative": dict(positional_encoding="xl_relative"),
}
SRC = torch.tensor([[5, 6, 7, 8, 9, 10, 11, EOS], [12, 13, EOS, PAD, PAD, PAD, PAD, PAD]])
TGT = torch.tensor([[1, 4, 5, 6, 7, 8, 9, 10, 11], [1, 13, 12, 11, 10, 9, 8, 7, 6]])


def _model(name: str, seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(tiny_config(**{**VARIANTS[name], **overrides})).eval()
    with torch.no_grad():  # XL's u, v start at zero: move them so that their terms matter
        for n, p in model.named_parameters():
            if n.endswith((".u", ".v")):
                p.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_learns_to_reverse(name):
    torch.manual_seed(0)
    model = Transformer(tiny_config(**VARIANTS[name]))
    losses = train_toy(model, "reverse", steps=450)  # Transformer-XL (no absolute positions) needs more than 300
    assert losses[-1] < 0.3, f"{name} did not learn: final loss {losses[-1]:.3f}"
    pairs = toy_pairs(60, "reverse", torch.Generator().manual_seed(12345))
    src, _, _ = toy_batch(pairs)
    hyps = greedy_search(model, src)
    exact = sum(h.tokens == t for h, (_, t) in zip(hyps, pairs, strict=True)) / len(pairs)
    assert exact >= 0.9, f"{name}: {exact:.2f} of held-out sequences reversed exactly"


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_incremental_decoding_equals_the_full_pass(name, norm):
    model = _model(name, norm_placement=norm)
    with torch.no_grad():
        full = model(SRC, TGT)
        enc = model.encode(SRC)
        kv = model.cross_kv(enc.memory)
        cache, steps = None, []
        for t in range(TGT.size(1)):  # one token at a time, as search decodes
            out = model.decode(TGT[:, t : t + 1], kv, enc.src_mask, cache, n_past=t)
            cache, steps = out.cache, steps + [out.logits]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
        first = model.decode(TGT[:, :3], kv, enc.src_mask)  # a prefix, then chunks of 2 after a non-empty cache
        chunks, cache = [first.logits], first.cache
        for t in range(3, TGT.size(1), 2):
            out = model.decode(TGT[:, t : t + 2], kv, enc.src_mask, cache, n_past=t)
            cache, chunks = out.cache, chunks + [out.logits]
        torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=1e-5)
        # the cache is used: another prefix's cache changes the next step
        other = model.decode(torch.tensor([[1, 13, 13], [1, 4, 4]]), kv, enc.src_mask)
        bad = model.decode(TGT[:, 3:4], kv, enc.src_mask, other.cache, n_past=3).logits
        assert not torch.allclose(bad, full[:, 3:4], atol=1e-4)


# --- sparse ------------------------------------------------------------------------------------------


def test_sparse_pattern_is_window_stride_and_global():
    pattern = SparsePattern(window=1, stride=3, n_global=1)
    allowed = pattern.mask(7).int().tolist()
    for i in range(7):
        for j in range(7):
            expected = abs(i - j) <= 1 or abs(i - j) % 3 == 0 or i < 1 or j < 1
            assert allowed[i][j] == expected, (i, j)
    assert SparsePattern(window=2).mask(2, n_past=3).tolist() == [
        [False, True, True, True, True],  # query 3 over keys 0..4: 1..5 are within 2 (the causal mask removes 4)
        [False, False, True, True, True],
    ]


def test_sparse_attention_is_zero_outside_the_pattern_and_rows_sum_to_one():
    model = _model("sparse")
    pattern = SparsePattern(1, 3, 1)
    with torch.no_grad():
        enc = model.encode(SRC)
        dec = model.decode(TGT, model.cross_kv(enc.memory), enc.src_mask)
    outside = ~pattern.mask(SRC.size(1))
    for probs in enc.attention:  # (batch, heads, src, src)
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))
        assert torch.all(probs[:, :, outside] == 0.0)
        assert torch.all(probs[0][:, ~outside] > 0.0)  # and not more: every allowed key has weight
    causal = torch.ones(TGT.size(1), TGT.size(1), dtype=torch.bool).tril()
    allowed = causal & pattern.mask(TGT.size(1))
    for probs in dec.self_attention:
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs.sum(-1)))
        assert torch.all(probs[:, :, ~allowed] == 0.0) and torch.all(probs[:, :, allowed] > 0.0)
    for probs in dec.cross_attention:  # cross-attention stays full
        assert torch.all(probs[0] > 0.0)


# --- linear ------------------------------------------------------------------------------------------


def test_linear_attention_is_the_kernel_formula_and_its_weights_reproduce_the_output():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))  # (batch, heads, len, d)
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]
    out, weights = linear_attention(q, k, v, key_mask)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    for b in range(2):
        for h in range(3):
            for i in range(5):
                keys = [j for j in range(5) if key_mask[b, 0, 0, j]]
                kernel = torch.stack([phi_q[b, h, i] @ phi_k[b, h, j] for j in keys])
                expected = sum(kernel[n] * v[b, h, j] for n, j in enumerate(keys)) / (kernel.sum() + EPS)
                torch.testing.assert_close(out[b, h, i], expected)
    assert elu_feature_map(torch.tensor([-5.0, 0.0, 3.0])).tolist() == pytest.approx([math.exp(-5), 1.0, 4.0])
    torch.testing.assert_close(weights @ v, out)  # the viewer's weights are the attention used
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))
    assert torch.all(weights[1, :, :, 3:] == 0.0)


def test_causal_linear_attention_is_the_running_sum_and_its_state_has_a_fixed_size():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    out, weights, state = causal_linear_attention(q, k, v)
    for i in range(6):  # position i sees keys 0..i: the non-causal formula on the prefix
        prefix, _ = linear_attention(q[:, :, i : i + 1], k[:, :, : i + 1], v[:, :, : i + 1], torch.ones(1, 1, 1, i + 1))
        torch.testing.assert_close(out[:, :, i : i + 1], prefix)
    torch.testing.assert_close(weights @ v, out)
    assert torch.all(weights.triu(diagonal=1) == 0.0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 2, 6))
    assert state[0].shape == (1, 2, 4, 4) and state[1].shape == (1, 2, 1, 4)  # whatever the length
    # continuing from the state of the first 4 tokens gives the last 2 outputs
    _, _, head = causal_linear_attention(q[:, :, :4], k[:, :, :4], v[:, :, :4])
    tail, tail_weights, _ = causal_linear_attention(q[:, :, 4:], k[:, :, 4:], v[:, :, 4:], head)
    torch.testing.assert_close(tail, out[:, :, 4:])
    torch.testing.assert_close(tail_weights, weights[:, :, 4:, 4:])  # the new tokens' keys only


def test_linear_decoder_without_n_past_after_a_state_is_refused():
    model = _model("linear")
    enc = model.encode(SRC)
    first = model.decode(TGT[:, :2], model.cross_kv(enc.memory), enc.src_mask)
    with pytest.raises(ValueError, match="n_past"):
        model.decode(TGT[:, 2:3], model.cross_kv(enc.memory), enc.src_mask, first.cache)


# --- Transformer-XL ----------------------------------------------------------------------------------


def test_xl_scores_are_the_four_terms_of_the_paper():
    torch.manual_seed(0)
    xl = XLRelativePositions(max_positions=16, d_model=8, n_heads=2)
    with torch.no_grad():
        xl.u.normal_(), xl.v.normal_()
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)  # 3 queries at positions 2, 3, 4 over keys 0..4
    got = xl(q, k)
    for h in range(2):
        for qi in range(3):
            i = qi + 2
            for j in range(5):
                w_r = xl.w_r(sinusoids(torch.tensor([i - j]), 8))[0].view(2, 4)[h]  # W_R R_{i-j}, head h
                b, c, d = q[0, h, qi] @ w_r, xl.u[h] @ k[0, h, j], xl.v[h] @ w_r
                torch.testing.assert_close(got[0, h, qi, j], b + c + d)


def test_xl_attention_depends_on_relative_positions_only():
    """The same tokens shifted right by padding on the left of the keys' positions score the same."""
    model = _model("xl_relative")
    attn = model.encoder_layers[0].self_attn
    x = torch.randn(1, 4, 32)
    with torch.no_grad():
        q, k = attn._split(attn.q_proj(x)), attn._split(attn.k_proj(x))
        near = attn.xl_positions(q, k)  # queries and keys at 0..3
        # the same 4 queries at positions 6..9 over 10 keys whose last 4 are these keys: distances unchanged
        far = attn.xl_positions(q, torch.cat([torch.randn(1, 4, 6, 8), k], dim=2))[..., 6:]
    torch.testing.assert_close(far, near)
    assert model.positions is None  # no absolute positions are added to the embeddings


def test_variant_configs_are_validated():
    with pytest.raises(ValueError, match="attention"):
        tiny_config(attention="reformer")
    with pytest.raises(ValueError, match="linear attention"):
        tiny_config(attention="linear", positional_encoding="xl_relative")
    with pytest.raises(ValueError, match="attention_dropout"):
        tiny_config(attention="linear", attention_dropout=0.1)
    with pytest.raises(ValueError, match="sparse_window"):
        tiny_config(attention="sparse", sparse_window=-1)
    assert math.isclose(sinusoids(torch.tensor([-3]), 4)[0, 0].item(), math.sin(-3.0), abs_tol=1e-6)


def test_causal_linear_attention_equals_the_running_sums_of_eq_10_to_12():
    """The masked-kernel form is the recurrence S_i = S_{i-1} + phi(k_i) v_i^T, z_i = z_{i-1} + phi(k_i) unrolled:
    compared with the recurrence written out, from an earlier state too."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 7, 5, generator=g, dtype=torch.float64) for _ in range(3))
    s0 = torch.rand(2, 3, 5, 5, generator=g, dtype=torch.float64)
    z0 = torch.rand(2, 3, 1, 5, generator=g, dtype=torch.float64)
    s, z, outs = s0, z0, []
    for i in range(7):
        phi_q, phi_k = elu_feature_map(q[:, :, i : i + 1]), elu_feature_map(k[:, :, i : i + 1])
        s, z = s + phi_k.transpose(-2, -1) @ v[:, :, i : i + 1], z + phi_k
        outs.append((phi_q @ s) / (phi_q @ z.transpose(-2, -1) + EPS))
    out, _, (s_end, z_end) = causal_linear_attention(q, k, v, (s0, z0))
    torch.testing.assert_close(out, torch.cat(outs, dim=2))
    torch.testing.assert_close(s_end, s)
    torch.testing.assert_close(z_end, z)
