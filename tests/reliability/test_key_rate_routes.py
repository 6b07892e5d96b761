"""A key's rate limit (MT_KEY_RATE_PER_S) holds on every route that queues work: each protocol's text routes and
its document uploads (issue 55: LibreTranslate's /translate_file never awaited its rate check)."""

from __future__ import annotations

import httpx
import pytest
from reliability_helpers import start_server

FILE = {"file": ("a.txt", b"Ein Hund.")}
# (route, key, how each request of it is sent): the first request spends the key's one token, the second must be 429
ROUTES = {
    "/v1/translate": lambda url, key: httpx.post(
        url + "/v1/translate", json={"texts": ["Ein Hund."]}, headers={"X-API-Key": key}, timeout=60
    ),
    "/v1/documents": lambda url, key: httpx.post(
        url + "/v1/documents", data={"target_language": "en", "source_language": "de"}, files=FILE,
        headers={"X-API-Key": key}, timeout=60,
    ),
    "/v2/document": lambda url, key: httpx.post(
        url + "/v2/document", data={"target_lang": "EN-US", "source_lang": "DE"}, files=FILE,
        headers={"Authorization": f"DeepL-Auth-Key {key}"}, timeout=60,
    ),
    "/translate": lambda url, key: httpx.post(
        url + "/translate", json={"q": "Ein Hund.", "source": "de", "target": "en", "api_key": key}, timeout=60
    ),
    "/translate_file": lambda url, key: httpx.post(
        url + "/translate_file", data={"source": "de", "target": "en", "api_key": key}, files=FILE, timeout=60
    ),
}  # fmt: skip
KEYS = {route: f"key{i}" for i, route in enumerate(ROUTES)}  # a bucket each: one route's requests spend no other's


@pytest.fixture(scope="module")
def limited_server(tiny_repository, tmp_path_factory):
    env = {"MT_API_KEYS": ",".join(KEYS.values()), "MT_KEY_RATE_PER_S": "0.001", "MT_KEY_BURST": "1"}
    server = start_server(tiny_repository, env, tmp_path_factory.mktemp("rates") / "service.log")
    yield server
    server.stop()


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_key_over_its_rate_gets_429_on_every_work_route(limited_server, route):
    send, key = ROUTES[route], KEYS[route]
    first = send(limited_server.url, key)
    assert first.status_code < 300, first.text
    second = send(limited_server.url, key)
    assert second.status_code == 429, second.text
    assert int(second.headers["retry-after"]) > 0
    assert "rate" in second.text
