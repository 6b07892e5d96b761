"""Access: optional API keys (Bearer or X-API-Key) on /v1/* and on the operations endpoints not in MT_OPEN_PATHS;
CORS only with MT_CORS_ORIGINS; X-Request-ID kept when safe, generated otherwise, and logged."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from reliability_helpers import log_entries, start_server

KEYS = ("alpha-3f9c2e", "beta-77d1a0")
ALLOWED_ORIGIN = "http://viewer.example"
BODY = {"texts": ["der hund"], "beam_size": 1}


@pytest.fixture(scope="module")
def keyed_server(tiny_repository, tmp_path_factory):
    env = {
        "MT_API_KEYS": ",".join(KEYS),
        "MT_OPEN_PATHS": "/healthz,/readyz",  # /metrics is closed here
        "MT_CORS_ORIGINS": ALLOWED_ORIGIN,
    }
    log_path = tmp_path_factory.mktemp("keyed") / "service.log"
    server = start_server(tiny_repository, env, log_path)  # readiness is checked on /readyz, an open path
    yield server
    server.stop()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"X-API-Key": "wrong"},
        {"Authorization": f"Basic {KEYS[0]}"},
        {"Authorization": f"Bearer {KEYS[0][:-1]}"},  # a prefix of a key is not the key
        {"Authorization": f"Bearer {KEYS[0]}x"},
        {"X-API-Key": ""},
    ],
    ids=["none", "bearer-wrong", "x-api-key-wrong", "basic", "prefix", "suffix", "empty"],
)
def test_v1_needs_a_valid_key(keyed_server, headers):
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/translate"), ("POST", "/v1/embed")):
        response = httpx.request(method, keyed_server.url + path, json=BODY, headers=headers, timeout=30)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert "API key" in response.json()["detail"]
        assert KEYS[0] not in response.text and KEYS[1] not in response.text


def test_invalid_body_without_key_is_401_not_422(keyed_server):
    """Nothing about a request is examined before the key is checked."""
    response = httpx.post(keyed_server.url + "/v1/translate", json={"nonsense": 1}, timeout=30)
    assert response.status_code == 401


@pytest.mark.parametrize("key", KEYS)
def test_each_key_works_as_bearer_and_as_x_api_key(keyed_server, key):
    for headers in ({"Authorization": f"Bearer {key}"}, {"authorization": f"bearer  {key}"}, {"X-API-Key": key}):
        response = httpx.post(keyed_server.url + "/v1/translate", json=BODY, headers=headers, timeout=30)
        assert response.status_code == 200, (headers, response.text)
        assert response.json()["translations"][0]["text"] == "the dog"


def test_open_paths_need_no_key_and_the_others_do(keyed_server):
    assert httpx.get(keyed_server.url + "/healthz", timeout=30).status_code == 200
    assert httpx.get(keyed_server.url + "/readyz", timeout=30).status_code == 200
    assert httpx.get(keyed_server.url + "/metrics", timeout=30).status_code == 401  # not in MT_OPEN_PATHS here
    metrics = httpx.get(keyed_server.url + "/metrics", headers={"X-API-Key": KEYS[1]}, timeout=30)
    assert metrics.status_code == 200 and "mt_requests_total" in metrics.text


def test_default_open_paths_include_metrics(strict_server):
    for path in ("/healthz", "/readyz", "/metrics"):
        assert httpx.get(strict_server.url + path, timeout=30).status_code == 200


def test_cors_allowed_origin_gets_the_header(keyed_server):
    headers = {"Origin": ALLOWED_ORIGIN, "Authorization": f"Bearer {KEYS[0]}"}
    response = httpx.post(keyed_server.url + "/v1/translate", json=BODY, headers=headers, timeout=30)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "x-request-id" in response.headers["access-control-expose-headers"].lower()


def test_cors_preflight_passes_without_a_key(keyed_server):
    """Browsers send the preflight without credentials; the real request then carries the key."""
    headers = {
        "Origin": ALLOWED_ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-request-timeout",
    }
    response = httpx.options(keyed_server.url + "/v1/translate", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "POST" in response.headers["access-control-allow-methods"]


def test_cors_other_origin_gets_no_header(keyed_server):
    headers = {"Origin": "http://evil.example", "Authorization": f"Bearer {KEYS[0]}"}
    response = httpx.post(keyed_server.url + "/v1/translate", json=BODY, headers=headers, timeout=30)
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers
    preflight = httpx.options(
        keyed_server.url + "/v1/translate",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        timeout=30,
    )
    assert "access-control-allow-origin" not in preflight.headers


def test_cors_off_without_origins_setting(strict_server):
    response = httpx.post(
        strict_server.url + "/v1/translate", json=BODY, headers={"Origin": ALLOWED_ORIGIN}, timeout=30
    )
    assert response.status_code == 200
    assert not any(name.startswith("access-control-") for name in response.headers)
    preflight = httpx.options(
        strict_server.url + "/v1/translate",
        headers={"Origin": ALLOWED_ORIGIN, "Access-Control-Request-Method": "POST"},
        timeout=30,
    )
    assert "access-control-allow-origin" not in preflight.headers


def _access_entry(server, request_id: str) -> dict:
    for _ in range(100):  # the access line is written just after the response
        entries = [e for e in log_entries(server.log_path) if e.get("request_id") == request_id]
        if entries:
            return entries[-1]
        time.sleep(0.05)
    raise AssertionError(f"request id {request_id} not in the log")


def test_request_id_kept_when_safe_and_logged(strict_server):
    rid = "client-req_42.a:b"
    response = httpx.post(strict_server.url + "/v1/translate", json=BODY, headers={"X-Request-ID": rid}, timeout=30)
    assert response.status_code == 200
    assert response.headers["x-request-id"] == rid
    entry = _access_entry(strict_server, rid)
    assert entry["endpoint"] == "/v1/translate" and entry["status"] == 200


@pytest.mark.parametrize("given", ["has space", "x" * 129, "semi;colon", 'quote"d', ""])
def test_unsafe_or_missing_request_id_is_replaced(strict_server, given):
    headers = {"X-Request-ID": given} if given else {}
    response = httpx.post(strict_server.url + "/v1/embed", json={"texts": ["der hund"]}, headers=headers, timeout=30)
    assert response.status_code == 200
    generated = response.headers["x-request-id"]
    assert generated != given and re.fullmatch(r"[0-9a-f]{32}", generated)
    _access_entry(strict_server, generated)


def test_every_response_carries_a_request_id(strict_server):
    for method, path in (("GET", "/healthz"), ("GET", "/nowhere"), ("POST", "/v1/translate")):
        response = httpx.request(method, strict_server.url + path, json={"bad": 1}, timeout=30)
        assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"]), (path, response.status_code)
