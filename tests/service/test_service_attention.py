"""POST /v1/attention: shapes per kind, probability rows, causal decoder, layer/head selection, mean over heads."""

from __future__ import annotations

import numpy as np
import pytest
from service_http import SAMPLES


def attention(api, **body) -> dict:
    response = api.post("/v1/attention", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_shapes_follow_the_token_lists_and_rows_are_distributions(api, manifest):
    cfg = manifest["model"]
    out = attention(api, source=SAMPLES[1])
    assert out["model"] == "de-en"
    n_src, n_tgt = len(out["source_tokens"]), len(out["target_tokens"])
    assert out["source_tokens"][-1] == "</s>" and out["target_tokens"][0] == "<s>"
    assert isinstance(out["score"], float) and isinstance(out["target_text"], str)
    expected = {
        "encoder": (cfg["n_encoder_layers"], cfg["n_heads"], n_src, n_src),
        "decoder": (cfg["n_decoder_layers"], cfg["n_heads"], n_tgt, n_tgt),
        "cross": (cfg["n_decoder_layers"], cfg["n_heads"], n_tgt, n_src),
    }
    for kind, shape in expected.items():
        matrix = np.asarray(out[kind])
        assert matrix.shape == shape, kind
        np.testing.assert_allclose(matrix.sum(axis=-1), 1.0, atol=1e-4)
        assert (matrix >= 0).all()
    decoder = np.asarray(out["decoder"])
    assert np.abs(np.triu(decoder, k=1)).max() < 1e-6  # a decoder position never attends to later ones


def test_default_target_is_the_models_own_translation(api):
    out = attention(api, source=SAMPLES[0], kinds=["cross"])
    greedy = api.post("/v1/translate", json={"texts": [SAMPLES[0]], "beam_size": 1}).json()["translations"][0]
    assert out["target_text"] == greedy["text"]
    assert out["target_tokens"] == ["<s>", *greedy["target_tokens"]]
    assert out["score"] == pytest.approx(greedy["score"], abs=1e-4)
    assert set(out) >= {"cross"} and not {"encoder", "decoder"} & set(out)


def test_a_given_target_is_forced(api):
    out = attention(api, source=SAMPLES[0], target="the dog runs", kinds=["decoder", "cross"])
    assert out["target_text"] == "the dog runs"
    n_tgt = len(out["target_tokens"])
    assert np.asarray(out["decoder"]).shape[2:] == (n_tgt, n_tgt)
    assert np.asarray(out["cross"]).shape[2] == n_tgt
    assert "encoder" not in out


def test_layer_and_head_selection_and_mean_over_heads(api, manifest):
    heads = manifest["model"]["n_heads"]
    full = attention(api, source=SAMPLES[3], kinds=["encoder", "cross"])
    one = attention(api, source=SAMPLES[3], kinds=["encoder", "cross"], layers=[0], heads=[heads - 1])
    mean = attention(api, source=SAMPLES[3], kinds=["encoder", "cross"], aggregate="mean")
    for kind in ("encoder", "cross"):
        f, o, m = (np.asarray(x[kind]) for x in (full, one, mean))
        assert o.shape == (1, 1, *f.shape[2:])
        np.testing.assert_allclose(o[0, 0], f[0, heads - 1], atol=1e-6)
        assert m.shape == (f.shape[0], 1, *f.shape[2:])
        np.testing.assert_allclose(m[:, 0], f.mean(axis=1), atol=1e-6)
        np.testing.assert_allclose(m.sum(axis=-1), 1.0, atol=1e-4)


def test_cross_attention_matches_translate_return_attention(api):
    out = attention(api, source=SAMPLES[2], kinds=["cross"])
    body = {"texts": [SAMPLES[2]], "beam_size": 1, "return_attention": True}
    greedy = api.post("/v1/translate", json=body).json()["translations"][0]
    # /v1/attention rows are the decoder inputs <s> y1 .. yn (the last one predicts </s>);
    # translate's rows are the steps that generated y1 .. yn, i.e. the same rows without the last
    np.testing.assert_allclose(np.asarray(out["cross"])[:, :, :-1], np.asarray(greedy["attention"]), atol=1e-4)


@pytest.mark.parametrize(
    "extra, needle",
    [({"layers": [7]}, "layers [7] out of range"), ({"heads": [0, 9]}, "heads [9] out of range")],
)
def test_out_of_range_selection_is_a_clear_422(api, extra, needle):
    response = api.post("/v1/attention", json={"source": SAMPLES[0], **extra})
    assert response.status_code == 422
    assert needle in str(response.json()["detail"])
