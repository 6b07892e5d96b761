"""Structured logs: every line is a JSON object; the access log has request id, endpoint, status, latency and the
engine batch ids; request text never reaches the log at the default level (not even from errors)."""

from __future__ import annotations

import time

import httpx
from reliability_helpers import log_entries

ACCESS_FIELDS = {"time", "level", "logger", "message", "request_id", "endpoint", "status", "latency_ms", "batch_ids"}
SECRET_WORDS = "zebrafink quokkaland"  # distinctive, and translatable (unknown words become pieces)


def _wait_for(server, request_ids: set[str]) -> list[dict]:
    for _ in range(100):
        entries = log_entries(server.log_path)
        if request_ids <= {e.get("request_id") for e in entries if e.get("logger") == "service.access"}:
            return entries
        time.sleep(0.05)
    raise AssertionError(f"access lines for {request_ids} not in the log")


def test_access_log_fields_and_batch_ids(strict_server):
    url = strict_server.url
    calls = {
        "log-translate": ("/v1/translate", {"texts": ["der hund", "ein mann spielt"], "beam_size": 2}),
        "log-embed": ("/v1/embed", {"texts": ["die katze"]}),
        "log-attention": ("/v1/attention", {"source": "der ball", "kinds": ["cross"]}),
        "log-invalid": ("/v1/translate", {"texts": []}),
    }
    for rid, (path, body) in calls.items():
        response = httpx.post(url + path, json=body, headers={"X-Request-ID": rid}, timeout=30)
        assert response.headers["x-request-id"] == rid
    entries = _wait_for(strict_server, set(calls))
    access = {e["request_id"]: e for e in entries if e.get("logger") == "service.access"}
    for rid, (path, _) in calls.items():
        entry = access[rid]
        assert entry.keys() >= ACCESS_FIELDS, entry
        assert entry["endpoint"] == path
        assert isinstance(entry["latency_ms"], float) and entry["latency_ms"] >= 0
        assert entry["method"] == "POST"
    for rid in ("log-translate", "log-embed", "log-attention"):
        assert access[rid]["status"] == 200
        assert access[rid]["model"] == "de-en"
        ids = access[rid]["batch_ids"]
        assert ids and all(isinstance(i, int) and i > 0 for i in ids), access[rid]
        assert len(ids) == len(set(ids))  # one entry per batch, not per sentence
    assert access["log-invalid"]["status"] == 422 and access["log-invalid"]["batch_ids"] == []


def test_batch_ids_are_those_of_the_batches_that_ran(strict_server):
    """Two sentences of one request batched together: one batch id, and it is a batch the metrics counted."""
    url = strict_server.url
    response = httpx.post(
        url + "/v1/translate",
        json={"texts": ["der hund", "die katze"], "beam_size": 3},
        headers={"X-Request-ID": "log-one-batch"},
        timeout=30,
    )
    assert response.status_code == 200
    entry = next(e for e in _wait_for(strict_server, {"log-one-batch"}) if e.get("request_id") == "log-one-batch")
    assert len(entry["batch_ids"]) == 1


def test_no_request_text_in_the_log(strict_server):
    url = strict_server.url
    secret = SECRET_WORDS
    sent = {
        "secret-1": ("/v1/translate", {"texts": [secret], "return_alignment": True}),
        "secret-2": ("/v1/embed", {"texts": [secret, "der hund"]}),
        "secret-3": ("/v1/attention", {"source": secret, "target": secret}),
        "secret-4": ("/v1/translate", {"texts": [secret], "beam_size": 99}),  # 422: the error echoes it to the client
        "secret-5": ("/v1/translate", {"texts": [secret], "model": secret}),  # 404 naming the model
        "secret-6": ("/v1/translate", {"texts": [secret + " " + "katze " * 30]}),  # 422 over the token limit
    }
    statuses = {}
    for rid, (path, body) in sent.items():
        statuses[rid] = httpx.post(url + path, json=body, headers={"X-Request-ID": rid}, timeout=30).status_code
    assert statuses == {
        "secret-1": 200,
        "secret-2": 200,
        "secret-3": 200,
        "secret-4": 422,
        "secret-5": 404,
        **{"secret-6": 422},
    }
    _wait_for(strict_server, set(sent))
    text = strict_server.log_path.read_text(encoding="utf-8")
    for word in secret.split():
        assert word not in text
    assert all(isinstance(e, dict) for e in log_entries(strict_server.log_path))  # every line is JSON
