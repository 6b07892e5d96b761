"""POST /v1/embed: shape, normalisation, pooling, determinism and independence from batch companions."""

from __future__ import annotations

import numpy as np
from service_http import SAMPLES, post_concurrently, toy_sentences


def embed(api, texts: list[str], **options) -> np.ndarray:
    response = api.post("/v1/embed", json={"texts": texts, **options})
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["model"] == "de-en"
    vectors = np.asarray(out["embeddings"], dtype=np.float64)
    assert vectors.shape == (len(texts), out["dimension"])
    return vectors


def test_one_vector_per_text_of_the_model_dimension(api, manifest):
    response = api.post("/v1/embed", json={"texts": SAMPLES})
    body = response.json()
    assert body["dimension"] == manifest["model"]["d_model"]
    assert len(body["embeddings"]) == len(SAMPLES)
    assert all(isinstance(x, float) for row in body["embeddings"] for x in row)


def test_normalised_vectors_have_norm_one_and_match_the_raw_direction(api):
    unit = embed(api, SAMPLES)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    raw = embed(api, SAMPLES, normalize=False)
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    assert not np.allclose(norms, 1.0, atol=1e-3)
    np.testing.assert_allclose(raw / norms, unit, atol=1e-5)


def test_embeddings_are_deterministic(api):
    np.testing.assert_array_equal(embed(api, SAMPLES), embed(api, SAMPLES))


def test_order_follows_the_inputs_and_distinct_texts_differ(api):
    forward = embed(api, SAMPLES)
    backward = embed(api, SAMPLES[::-1])
    np.testing.assert_allclose(backward[::-1], forward, atol=1e-5)
    similarity = forward @ forward.T
    assert (similarity[~np.eye(len(SAMPLES), dtype=bool)] < 1 - 1e-4).all()


def test_a_text_embeds_the_same_alone_and_with_batch_companions(api, live_server):
    target = SAMPLES[2]
    companions = toy_sentences(6, seed=3, min_words=1, max_words=14)
    for pooling in ("mean", "max"):
        alone = embed(api, [target], pooling=pooling)[0]
        within = embed(api, [companions[0], target, *companions[1:]], pooling=pooling)[1]
        np.testing.assert_allclose(within, alone, atol=1e-5)
    bodies = [{"texts": [text]} for text in [target, *companions] * 4]
    responses = post_concurrently(live_server.url, "/v1/embed", bodies)
    alone = embed(api, [target])[0]
    for body, response in zip(bodies, responses, strict=True):
        assert response.status_code == 200
        if body["texts"] == [target]:
            np.testing.assert_allclose(np.asarray(response.json()["embeddings"][0]), alone, atol=1e-5)


def test_max_pooling_differs_from_mean_pooling_and_bounds_it(api):
    mean = embed(api, SAMPLES, pooling="mean", normalize=False)
    top = embed(api, SAMPLES, pooling="max", normalize=False)
    assert not np.allclose(mean, top, atol=1e-3)
    assert (top >= mean - 1e-5).all()  # the maximum over positions is at least their mean
    np.testing.assert_allclose(np.linalg.norm(embed(api, SAMPLES, pooling="max"), axis=1), 1.0, atol=1e-5)
