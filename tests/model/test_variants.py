"""Every architecture variant builds, trains a few steps and decodes."""

from __future__ import annotations

import pytest
import torch
from model_toys import EOS, PAD, TOY_VOCAB, tiny_config, toy_batch, toy_pairs, train_toy

from model.decoding import beam_search, greedy_search
from model.linear_attention import LinearAttention
from model.sparse_attention import SparsePattern
from model.transformer import Transformer

VARIANTS = {
    "baseline": {},
    "pre_ln": {"norm_placement": "pre"},
    "learned_pe": {"positional_encoding": "learned"},
    "relative_pe": {"positional_encoding": "relative"},
    "xl_relative_pe": {"positional_encoding": "xl_relative"},
    "sparse_attention": {"attention": "sparse", "sparse_window": 1, "sparse_stride": 2, "sparse_global": 1},
    "linear_attention": {"attention": "linear"},
    "gelu": {"activation": "gelu"},
    "swiglu": {"activation": "swiglu"},
    "geglu": {"activation": "geglu"},
    "swish": {"activation": "swish"},
    "marian_options": {"sinusoidal_layout": "halves", "output_bias": True},
    "untied": {"tie_embeddings": False},
    "everything": {
        "norm_placement": "pre",
        "positional_encoding": "relative",
        "activation": "swiglu",
        "tie_embeddings": False,
        "dropout": 0.1,
    },
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variant_trains_and_decodes(name):
    torch.manual_seed(0)
    cfg = tiny_config(n_encoder_layers=1, n_decoder_layers=1, **VARIANTS[name])
    model = Transformer(cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    losses = train_toy(model, "copy", steps=30, lr=1e-2, batch_size=32)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses
    for n, p in model.named_parameters():
        assert not torch.equal(p, before[n]), f"{n} did not change"

    src, _, _ = toy_batch(toy_pairs(4, "copy", torch.Generator().manual_seed(5)))
    greedy = greedy_search(model, src, max_length=8)
    nbest = beam_search(model, src, beam_size=3, max_length=8, n_best=2)
    assert len(greedy) == len(nbest) == 4
    for hyp in greedy + [h for hyps in nbest for h in hyps]:
        assert isinstance(hyp.tokens, list) and len(hyp.tokens) <= 8
        assert all(isinstance(t, int) and 0 <= t < TOY_VOCAB and t not in (PAD, EOS) for t in hyp.tokens)
    for hyps in nbest:
        assert 1 <= len(hyps) <= 2


def test_variants_have_the_modules_they_claim():
    gated = Transformer(tiny_config(activation="geglu"))
    assert gated.encoder_layers[0].ffn.w3 is not None
    assert Transformer(tiny_config()).encoder_layers[0].ffn.w3 is None

    untied = Transformer(tiny_config(tie_embeddings=False))
    assert untied.tgt_embed is not untied.src_embed
    assert untied.output.weight is not untied.tgt_embed.weight
    tied = Transformer(tiny_config())
    assert tied.tgt_embed is tied.src_embed and tied.output.weight is tied.tgt_embed.weight

    relative = Transformer(tiny_config(positional_encoding="relative"))
    assert relative.positions is None
    assert relative.encoder_layers[0].self_attn.relative is not None
    assert relative.decoder_layers[0].self_attn.relative is not None
    assert relative.decoder_layers[0].cross_attn.relative is None

    xl = Transformer(tiny_config(positional_encoding="xl_relative"))
    assert xl.positions is None and xl.encoder_layers[0].self_attn.xl_positions is not None
    assert xl.decoder_layers[0].self_attn.xl_positions is not None
    assert xl.decoder_layers[0].cross_attn.xl_positions is None

    linear = Transformer(tiny_config(attention="linear"))
    assert isinstance(linear.encoder_layers[0].self_attn, LinearAttention)
    assert linear.decoder_layers[0].self_attn.causal and not linear.encoder_layers[0].self_attn.causal
    assert not isinstance(linear.decoder_layers[0].cross_attn, LinearAttention)  # cross-attention stays softmax

    sparse = Transformer(tiny_config(attention="sparse", sparse_window=3))
    assert sparse.sparse == SparsePattern(3) and Transformer(tiny_config()).sparse is None

    pre = Transformer(tiny_config(norm_placement="pre"))
    assert isinstance(pre.encoder_norm, torch.nn.LayerNorm) and isinstance(pre.decoder_norm, torch.nn.LayerNorm)
    assert isinstance(Transformer(tiny_config()).encoder_norm, torch.nn.Identity)


def test_banned_ids_are_never_generated_and_the_rest_keep_their_probabilities():
    """banned_ids: -inf after the log-softmax (as generate's bad_words_ids), the other ids' values unchanged."""
    torch.manual_seed(0)
    free = Transformer(tiny_config(n_encoder_layers=1, n_decoder_layers=1)).eval()
    banned = Transformer(tiny_config(n_encoder_layers=1, n_decoder_layers=1, banned_ids=[5, 6])).eval()
    banned.load_state_dict(free.state_dict())
    src, _, _ = toy_batch(toy_pairs(4, "copy", torch.Generator().manual_seed(5)))
    logits = free(src, src[:, :3])
    allowed, masked = free.log_probs(logits), banned.log_probs(logits)
    assert torch.isneginf(masked[..., [5, 6]]).all()
    keep = [i for i in range(logits.size(-1)) if i not in (5, 6)]
    torch.testing.assert_close(masked[..., keep], allowed[..., keep], rtol=0, atol=0)
    for hyp in greedy_search(banned, src, max_length=8) + [
        h for hs in beam_search(banned, src, 3, max_length=8) for h in hs
    ]:
        assert not {5, 6} & set(hyp.tokens)
    with pytest.raises(ValueError, match="banned_ids"):
        tiny_config(banned_ids=[TOY_VOCAB])


def test_output_bias_and_unscaled_embeddings():
    cfg = tiny_config(output_bias=True, scale_embedding=False)
    model = Transformer(cfg)
    assert model.output.bias is not None and model.embed_scale == 1.0
    assert Transformer(tiny_config()).output.bias is None
    assert Transformer(tiny_config()).embed_scale == pytest.approx(cfg.d_model**0.5)


def test_invalid_config_values_are_rejected():
    with pytest.raises(ValueError, match="activation"):
        tiny_config(activation="tanh")
    with pytest.raises(ValueError, match="sinusoidal_layout"):
        tiny_config(sinusoidal_layout="shuffled")
    with pytest.raises(ValueError, match="divisible"):
        tiny_config(d_model=30, n_heads=4)
