"""MT_BATCHING=false: every engine batch holds exactly one sentence, and the answers equal the batched server's."""

from __future__ import annotations

import numpy as np
import pytest
from live_server import LiveServer
from service_http import batch_deltas, post_concurrently, scrape, toy_sentences


@pytest.fixture(scope="module")
def unbatched(tiny_repository, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("unbatched") / "service.log"
    with LiveServer(tiny_repository, env={"MT_BATCHING": "false", "MT_MAX_WAIT_MS": "10"}, log_path=log_path) as server:
        yield server


def test_every_batch_has_one_sentence_under_concurrency(unbatched, live_server):
    texts = toy_sentences(24, seed=11)
    bodies = [{"texts": [t], "beam_size": 2} for t in texts]
    bodies += [{"texts": texts[:3], "beam_size": 2}, {"texts": texts[3:7], "beam_size": 1}]  # multi-text requests too
    before = scrape(unbatched.url)
    responses = post_concurrently(unbatched.url, "/v1/translate", bodies)
    after = scrape(unbatched.url)
    assert [r.status_code for r in responses] == [200] * len(bodies)
    batches, sentences, ones = batch_deltas(before, after)
    assert sentences == 24 + 3 + 4
    assert batches == sentences == ones

    batched = post_concurrently(live_server.url, "/v1/translate", bodies)
    for a, b in zip(responses, batched, strict=True):
        assert [t["text"] for t in a.json()["translations"]] == [t["text"] for t in b.json()["translations"]]


def test_embeddings_unbatched_match_batched(unbatched, api):
    texts = toy_sentences(5, seed=12)
    alone = np.asarray(api.post("/v1/embed", json={"texts": texts}).json()["embeddings"])
    before = scrape(unbatched.url)
    response = post_concurrently(unbatched.url, "/v1/embed", [{"texts": texts}])[0]
    batches, sentences, ones = batch_deltas(before, scrape(unbatched.url))
    assert batches == sentences == ones == 5
    np.testing.assert_allclose(np.asarray(response.json()["embeddings"]), alone, atol=1e-5)
