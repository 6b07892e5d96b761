"""A live server per attention variant: it translates, and /v1/attention shows the attention the variant used.

Rows are distributions (sum 1); sparse attention is exactly zero outside its local window (encoder: |i - j| > w,
decoder: also the future); linear attention's implied weights are positive on every key a query sees.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from live_server import LiveServer
from tiny_bundle import SAMPLE_SENTENCES


@pytest.fixture(scope="module")
def variant_api(attention_variant_dir, tmp_path_factory):
    """(model config from the bundle's manifest, HTTP client) of a live server on the variant's bundle."""
    manifest = attention_variant_dir / "repository" / "de-en" / "1" / "manifest.json"
    config = json.loads(manifest.read_text())["model"]
    log_path = tmp_path_factory.mktemp("server") / "service.log"
    server = LiveServer(attention_variant_dir / "repository", log_path=log_path).start()
    with httpx.Client(base_url=server.url, timeout=60.0) as client:
        yield config, client
    server.stop()


def _attention(api: httpx.Client, **body) -> dict:
    response = api.post("/v1/attention", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_variant_translates_and_its_attention_rows_sum_to_one(variant_api):
    _, api = variant_api
    response = api.post("/v1/translate", json={"texts": SAMPLE_SENTENCES[:3], "beam_size": 4})
    assert response.status_code == 200, response.text
    assert all(t["text"] for t in response.json()["translations"])
    out = _attention(api, source=SAMPLE_SENTENCES[2])
    n_src, n_tgt = len(out["source_tokens"]), len(out["target_tokens"])
    assert n_tgt > 2
    for kind, shape in (("encoder", (n_src, n_src)), ("decoder", (n_tgt, n_tgt)), ("cross", (n_tgt, n_src))):
        matrix = np.asarray(out[kind])
        assert matrix.shape[2:] == shape, kind
        np.testing.assert_allclose(matrix.sum(axis=-1), 1.0, atol=1e-4, err_msg=kind)
        assert (matrix >= 0).all(), kind
    assert np.abs(np.triu(np.asarray(out["decoder"]), k=1)).max() == 0.0  # never a later target token


def test_the_attention_shows_the_variants_pattern(variant_api):
    config, api = variant_api
    out = _attention(api, source=SAMPLE_SENTENCES[4], target="a small red cat sits under the blue ball")
    encoder, decoder = np.asarray(out["encoder"]), np.asarray(out["decoder"])
    n_src, n_tgt = encoder.shape[-1], decoder.shape[-1]
    assert n_src > 6 and n_tgt > 6  # longer than the sparse window on both sides
    if config["attention"] == "sparse":
        w = config["sparse_window"]
        i, j = np.indices((n_src, n_src))
        assert (encoder[..., np.abs(i - j) > w] == 0.0).all()  # exact zeros outside the local window
        assert (encoder[..., np.abs(i - j) <= w] > 0.0).all()
        i, j = np.indices((n_tgt, n_tgt))
        assert (decoder[..., (i - j > w) | (j > i)] == 0.0).all()
        assert (decoder[..., (i - j <= w) & (j <= i)] > 0.0).all()
    else:  # linear (implied kernel weights) and Transformer-XL: every key a query sees has weight
        assert (encoder > 0.0).all()
        assert (decoder[..., np.tril(np.ones((n_tgt, n_tgt), dtype=bool))] > 0.0).all()
    cross = np.asarray(out["cross"])
    assert (cross > 0.0).all()  # cross-attention stays full in every variant
