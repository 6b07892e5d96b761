"""API keys, the queue-full refusal and metrics on the v2 and LibreTranslate endpoints (their own servers)."""

from __future__ import annotations

import urllib.error

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from libretranslatepy import LibreTranslateAPI
from reliability_helpers import FULL_QUEUE_ENV, full_queue, metric, start_server
from tritonclient.utils import InferenceServerException

INFER = {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["Ein Hund."]}]}


@pytest.fixture(scope="module")
def keyed_server(tiny_repository, tmp_path_factory):
    log = tmp_path_factory.mktemp("keyed") / "service.log"
    server = start_server(tiny_repository, {"MT_API_KEYS": "k1,k2"}, log)
    yield server
    server.stop()


def test_v2_needs_a_key(keyed_server):
    url = keyed_server.url
    refused = httpx.post(url + "/v2/models/de-en/infer", json=INFER)
    assert refused.status_code == 401 and set(refused.json()) == {"error"}
    assert httpx.get(url + "/v2/health/ready").status_code == 401
    ok = httpx.post(url + "/v2/models/de-en/infer", json=INFER, headers={"Authorization": "Bearer k2"})
    assert ok.status_code == 200
    with triton.InferenceServerClient(url.removeprefix("http://")) as client:
        with pytest.raises(InferenceServerException):
            client.get_model_metadata("de-en")
        assert client.get_model_metadata("de-en", headers={"X-API-Key": "k1"})["name"] == "de-en"
        tensor = triton.InferInput("TEXT", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([b"Ein Hund."], dtype=object))
        assert client.infer("de-en", [tensor], headers={"Authorization": "Bearer k1"}).as_numpy(
            "TRANSLATION"
        ).shape == (1,)


def test_libretranslate_key_in_the_body(keyed_server):
    url = keyed_server.url
    wrong = httpx.post(url + "/translate", json={"q": "Hund", "source": "de", "target": "en", "api_key": "nope"})
    assert wrong.status_code == 403 and wrong.json() == {"error": "Invalid API key"}
    missing = httpx.post(url + "/translate", data={"q": "Hund", "source": "de", "target": "en"})
    assert missing.status_code == 400 and "API key" in missing.json()["error"]
    assert httpx.post(url + "/detect", data={"q": "Hund", "api_key": "bad"}).status_code == 403
    assert LibreTranslateAPI(url, api_key="k2").translate("Ein Hund.", "de", "en")
    with pytest.raises(urllib.error.HTTPError) as info:
        LibreTranslateAPI(url, api_key="k3").translate("Ein Hund.", "de", "en")
    assert info.value.code == 403
    assert httpx.get(url + "/languages").status_code == 200  # as in LibreTranslate: no key needed
    assert httpx.get(url + "/health").json() == {"status": "ok"}  # nor here


def test_full_queue_gets_each_protocols_429_and_metrics_count_it(tiny_repository, tmp_path):
    server = start_server(tiny_repository, FULL_QUEUE_ENV, tmp_path / "service.log")
    try:
        url = server.url
        with full_queue(url) as held:
            libre = httpx.post(url + "/translate", json={"q": "Hund", "source": "de", "target": "en"}, timeout=10)
            assert libre.status_code == 429 and libre.json()["error"].startswith("Slowdown: ")
            assert int(libre.headers["retry-after"]) >= 1
            v2 = httpx.post(url + "/v2/models/de-en/infer", json=INFER, timeout=10)
            assert v2.status_code == 429 and set(v2.json()) == {"error"}
            assert held.result().status_code == 200
        assert httpx.post(url + "/v2/models/de-en/infer", json=INFER, timeout=30).status_code == 200
        assert metric(url, "mt_requests_total", endpoint="/v2/models/{name}/infer", model="de-en", status="200") == 1
        assert metric(url, "mt_requests_total", endpoint="/v2/models/{name}/infer", status="429") == 1
        assert metric(url, "mt_requests_total", endpoint="/translate", status="429") == 1
    finally:
        server.stop()
