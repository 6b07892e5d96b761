"""Fault isolation: an engine batch that raises (a text with FAIL_BATCH_MARKER; tests/fault_injection.py wraps the
batch runner)
fails only the requests in that batch, with a 500 that says 'internal error' and the request id (no stack
trace); the log has the exception with the request ids; other batches and the next batch are unaffected."""

from __future__ import annotations

import asyncio
import time

import httpx
from fault_injection import FAIL_BATCH_MARKER
from reliability_helpers import log_entries

BAD_KEY = {"beam_size": 2}  # the failing request's decoding options (its batching key)
OTHERS = {
    "iso-greedy": ("/v1/translate", {"texts": ["der hund", "ein mann spielt"], "beam_size": 1}),
    "iso-beam3": ("/v1/translate", {"texts": ["die katze sitzt auf dem ball"], "beam_size": 3}),
    "iso-nbest": ("/v1/translate", {"texts": ["ein kind rennt"], "beam_size": 4, "num_hypotheses": 2}),
    "iso-embed": ("/v1/embed", {"texts": ["der hund", "die katze"]}),
    "iso-attention": ("/v1/attention", {"source": "der ball", "kinds": ["cross"]}),
}
SAME_KEY = {
    f"iso-same-{i}": ("/v1/translate", {"texts": [text], **BAD_KEY})
    for i, text in enumerate(["der hund", "eine frau", "das kind"])
}


async def _send_all(url: str, calls: dict[str, tuple[str, dict]]) -> dict[str, httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        responses = await asyncio.gather(
            *(client.post(path, json=body, headers={"X-Request-ID": rid}) for rid, (path, body) in calls.items())
        )
    return dict(zip(calls, responses, strict=True))


def _access(server, rids: set[str]) -> dict[str, dict]:
    for _ in range(100):
        found = {e["request_id"]: e for e in log_entries(server.log_path) if e.get("logger") == "service.access"}
        if rids <= found.keys():
            return found
        time.sleep(0.05)
    raise AssertionError("access lines missing")


def test_failing_batch_fails_only_its_own_requests(strict_server):
    url = strict_server.url
    alone = {
        rid: httpx.post(url + path, json=body, timeout=60).json()
        for rid, (path, body) in {**OTHERS, **SAME_KEY}.items()
    }
    bad = {"iso-bad": ("/v1/translate", {"texts": ["der hund", f"die katze {FAIL_BATCH_MARKER}"], **BAD_KEY})}
    responses = asyncio.run(_send_all(url, {**bad, **OTHERS, **SAME_KEY}))

    failed = responses["iso-bad"]
    assert failed.status_code == 500
    assert failed.json() == {"detail": "internal error; quote request id iso-bad when reporting it"}
    for leak in ("Traceback", "RuntimeError", "test hook", FAIL_BATCH_MARKER, "die katze"):
        assert leak not in failed.text

    for rid in OTHERS:  # other decoding options: other batches, untouched answers
        assert responses[rid].status_code == 200, (rid, responses[rid].text)
        assert responses[rid].json() == alone[rid], rid

    entries = log_entries(strict_server.log_path)
    errors = [e for e in entries if e["level"] == "error" and "iso-bad" in e.get("request_ids", [])]
    assert len(errors) == 1, errors
    assert "injected engine failure" in errors[0]["exception"]
    failed_batch = errors[0]["batch_id"]
    access = _access(strict_server, set(responses))
    assert access["iso-bad"]["status"] == 500 and access["iso-bad"]["batch_ids"] == [failed_batch]
    for rid in SAME_KEY:  # same options: a 500 exactly when batched with the bad request
        in_failed = failed_batch in access[rid]["batch_ids"]
        assert responses[rid].status_code == (500 if in_failed else 200), (rid, access[rid])
        assert set(errors[0]["request_ids"]) >= ({rid} if in_failed else set())
        if not in_failed:  # maybe batched with its same-options companions: same text, scores up to rounding
            got, expected = responses[rid].json()["translations"], alone[rid]["translations"]
            assert [t["text"] for t in got] == [t["text"] for t in expected]

    # the next batch with the same options succeeds, and the process is still up
    again = httpx.post(url + "/v1/translate", json={"texts": ["der hund"], **BAD_KEY}, timeout=60)
    assert again.status_code == 200 and again.json()["translations"][0]["text"] == "the dog"
    assert strict_server.process.poll() is None


def test_marker_is_inert_in_the_service_itself(live_server):
    """The shared server is plain ``python -m service``: without the fault injector the marker is just text."""
    response = httpx.post(live_server.url + "/v1/translate", json={"texts": [FAIL_BATCH_MARKER]}, timeout=60)
    assert response.status_code == 200
