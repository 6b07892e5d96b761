"""Engine.embed (pooled encoder states) and Engine.attention (encoder, decoder and cross attention)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.decoding import TranslateOptions


def test_embed_shape_and_unit_norm(fp32_engine, sentences):
    vectors = fp32_engine.embed(sentences)
    assert vectors.shape == (len(sentences), fp32_engine.config["d_model"])
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_embed_without_normalize_is_the_raw_pooled_state(fp32_engine, sentences):
    raw = fp32_engine.embed(sentences, normalize=False)
    norms = np.linalg.norm(raw, axis=1)
    assert np.abs(norms - 1.0).max() > 1e-2  # not unit vectors
    np.testing.assert_allclose(raw / norms[:, None], fp32_engine.embed(sentences), atol=1e-5)


def test_embed_is_deterministic(fp32_engine, sentences):
    first = fp32_engine.embed(sentences, pooling="mean")
    assert np.array_equal(first, fp32_engine.embed(sentences, pooling="mean"))
    assert np.array_equal(fp32_engine.embed(sentences, pooling="max"), fp32_engine.embed(sentences, pooling="max"))


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_embed_is_independent_of_batch_companions(fp32_engine, sentences, pooling):
    longest = max(sentences, key=len)
    for text in sentences[:6]:
        alone = fp32_engine.embed([text], pooling=pooling)[0]
        in_batch = fp32_engine.embed([longest, text, "der hund"], pooling=pooling)[1]  # padded here
        np.testing.assert_allclose(in_batch, alone, atol=1e-5)


def test_mean_and_max_pooling_over_the_real_tokens(fp32_engine, sentences):
    texts = sentences[:4]
    sources = fp32_engine.source_ids(texts)
    enc = fp32_engine.run_encoder(sources)
    for pooling, reduce in (("mean", np.mean), ("max", np.max)):
        got = fp32_engine.embed(texts, pooling=pooling, normalize=False)
        for b, src in enumerate(sources):
            want = reduce(enc["encoder_output"][b, : len(src)].astype(np.float64), axis=0)
            np.testing.assert_allclose(got[b], want, atol=1e-5)
    assert not np.allclose(fp32_engine.embed(texts, pooling="mean"), fp32_engine.embed(texts, pooling="max"))


def test_embed_rejects_an_unknown_pooling(fp32_engine):
    with pytest.raises(ValueError, match="pooling"):
        fp32_engine.embed(["der hund"], pooling="median")


def test_similar_sentences_embed_closer_than_different_ones(fp32_engine):
    a, b, c = fp32_engine.embed(["ein mann spielt im park", "ein mann spielt", "katze katze katze katze"])
    assert float(a @ b) > float(a @ c)


def _check_attention(result: dict, n_layers: dict[str, int], n_heads: int) -> None:
    n_src, n_tgt = len(result["source_tokens"]), len(result["target_tokens"])
    assert result["encoder"].shape == (n_layers["encoder"], n_heads, n_src, n_src)
    assert result["decoder"].shape == (n_layers["decoder"], n_heads, n_tgt, n_tgt)
    assert result["cross"].shape == (n_layers["decoder"], n_heads, n_tgt, n_src)
    for name in ("encoder", "decoder", "cross"):
        probs = result[name]
        assert (probs >= 0).all()
        np.testing.assert_allclose(probs.sum(axis=-1), 1.0, atol=1e-5, err_msg=name)
    decoder = result["decoder"]
    future = np.triu(np.ones((n_tgt, n_tgt), dtype=bool), k=1)
    assert (decoder[..., future] == 0.0).all()  # causal: exactly zero on the future
    assert (decoder[..., ~future] > 0).any()


@pytest.mark.parametrize("target", [None, "a man plays in-the park"])
def test_attention_shapes_rows_and_causality(fp32_engine, target):
    cfg = fp32_engine.config
    layers = {"encoder": cfg["n_encoder_layers"], "decoder": cfg["n_decoder_layers"]}
    result = fp32_engine.attention("ein mann spielt im park", target)
    _check_attention(result, layers, cfg["n_heads"])
    assert result["source_tokens"][-1] == "</s>"
    assert result["target_tokens"][0] == "<s>"
    assert len(result["target_tokens"]) == len(result["target_ids"]) + 1
    if target is not None:
        assert result["target_text"] == target
        assert result["target_ids"] == fp32_engine.tokenizer.encode(target)
    else:
        assert result["target_text"] == fp32_engine.translate(["ein mann spielt im park"])[0].text


def test_translation_attention_is_the_cross_attention_of_its_tokens(fp32_engine, sentences):
    translations = fp32_engine.translate(sentences[:5], TranslateOptions(beam_size=4, return_attention=True))
    cfg = fp32_engine.config
    for t in translations:
        assert t.attention.shape == (cfg["n_decoder_layers"], cfg["n_heads"], len(t.token_ids), len(t.source_ids))
        np.testing.assert_allclose(t.attention.sum(axis=-1), 1.0, atol=1e-5)
        alone = fp32_engine.attention_ids(t.source_ids, t.token_ids)["cross"][:, :, : len(t.token_ids)]
        np.testing.assert_allclose(t.attention, alone, atol=1e-5)
