"""Incremental decoding with the key/value cache gives the logits of the full teacher-forced pass."""

from __future__ import annotations

import pytest
import torch
from model_toys import EOS, PAD, tiny_config

from model.transformer import Transformer


@pytest.mark.parametrize("activation", ["relu", "swiglu"])
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "relative", "xl_relative"])
def test_cached_decoding_matches_the_full_pass(positional, norm, activation):
    torch.manual_seed(0)
    cfg = tiny_config(positional_encoding=positional, norm_placement=norm, activation=activation)
    model = Transformer(cfg).eval()
    src = torch.tensor([[5, 6, 7, 8, 9, EOS], [10, 11, EOS, PAD, PAD, PAD]])
    tgt = torch.tensor([[1, 4, 5, 6, 7, 8, 9, 10], [1, 13, 12, 11, 10, 9, 8, 7]])  # longer than k=4
    with torch.no_grad():
        full = model(src, tgt)  # (batch, tgt, vocab)
        enc = model.encode(src)
        kv = model.cross_kv(enc.memory)

        cache, steps = None, []
        for t in range(tgt.size(1)):  # one token at a time
            out = model.decode(tgt[:, t : t + 1], kv, enc.src_mask, cache)
            cache = out.cache
            steps.append(out.logits)
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
        assert cache[0][0].shape == (2, cfg.n_heads, tgt.size(1), cfg.d_head)

        # A prefix of 3 in one call, then chunks of 2: the causal mask with a non-empty past.
        first = model.decode(tgt[:, :3], kv, enc.src_mask)
        chunks, cache = [first.logits], first.cache
        for t in range(3, tgt.size(1), 2):
            out = model.decode(tgt[:, t : t + 2], kv, enc.src_mask, cache)
            cache = out.cache
            chunks.append(out.logits)
        torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=1e-5)


def test_the_cache_is_used():
    """A wrong cache changes the result: the test above cannot pass by ignoring the cache."""
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    src = torch.tensor([[5, 6, 7, EOS]])
    tgt = torch.tensor([[1, 4, 5, 6]])
    with torch.no_grad():
        enc = model.encode(src)
        kv = model.cross_kv(enc.memory)
        prefix = model.decode(tgt[:, :3], kv, enc.src_mask)
        good = model.decode(tgt[:, 3:], kv, enc.src_mask, prefix.cache).logits
        other = model.decode(torch.tensor([[1, 13, 13]]), kv, enc.src_mask)
        bad = model.decode(tgt[:, 3:], kv, enc.src_mask, other.cache).logits
    torch.testing.assert_close(good, model(src, tgt)[:, 3:], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(good, bad, atol=1e-4)
