"""A model's decoding defaults through the real service: GET /v1/models shows them, /v1/translate requests that
leave ``no_repeat_ngram_size`` out get the model's, an explicit value (0 included) wins, on every API path that
reaches the scheduler (here /v1 and the DeepL API)."""

from __future__ import annotations

import httpx
import pytest
from bundle_copies import copy_bundle
from live_server import LiveServer
from tiny_bundle import SAMPLE_SENTENCES

from export.cli import main as export_cli


@pytest.fixture(scope="module")
def api(tiny_bundle_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("decoding-service")
    bundle = copy_bundle(tiny_bundle_dir, root / "repository" / "de-en" / "1")
    assert export_cli(["decoding", "--bundle", str(bundle), "--no-repeat-ngram-size", "1"]) == 0
    server = LiveServer(root / "repository", env={"MT_MAX_WAIT_MS": "5"}, log_path=root / "service.log").start()
    try:
        with httpx.Client(base_url=server.url, timeout=60.0) as client:
            yield client
    finally:
        server.stop()


def _tokens(api, **body) -> list[list[str]]:
    response = api.post("/v1/translate", json={"texts": SAMPLE_SENTENCES, "split_sentences": False, **body})
    assert response.status_code == 200, response.text
    return [t["target_tokens"] for t in response.json()["translations"]]


def test_models_shows_the_default(api):
    model = api.get("/v1/models").json()["models"][0]
    assert model["decoding"] == {"no_repeat_ngram_size": 1}


@pytest.mark.parametrize("beam", [1, 4])
def test_left_out_takes_the_model_default_and_explicit_wins(api, beam):
    default = _tokens(api, beam_size=beam)
    assert default == _tokens(api, beam_size=beam, no_repeat_ngram_size=1)
    for tokens in default:
        assert len(tokens) == len(set(tokens)), tokens
    off = _tokens(api, beam_size=beam, no_repeat_ngram_size=0)
    assert any(len(t) != len(set(t)) for t in off)  # off is really off on this model


def test_deepl_gets_the_model_default(api):
    response = api.post("/v2/translate", json={"text": SAMPLE_SENTENCES, "target_lang": "EN", "source_lang": "DE"})
    assert response.status_code == 200, response.text
    texts = [t["text"] for t in response.json()["translations"]]
    v1 = api.post("/v1/translate", json={"texts": SAMPLE_SENTENCES, "beam_size": 4}).json()["translations"]
    assert texts == [t["text"] for t in v1]
