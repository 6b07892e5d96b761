"""Deadlines and cancellation: work whose deadline passes, or whose client goes away, before it starts is dropped
without engine work and counted in mt_dropped_requests_total{reason}; the deadline comes from timeout_s or
X-Request-Timeout and is capped by MT_MAX_REQUEST_TIMEOUT_S.

The server holds a lone sentence for MAX_WAIT_MS (batches of up to 64 wait to fill, even while the engine is idle:
MT_DISPATCH_WHEN_IDLE=false), far longer than the
deadlines used here, so nothing reaches the engine unless a test wants it to.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest
from reliability_helpers import metric, start_server

from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BatchLimits
from service.scheduling.dynamic import dynamic_scheduler
from service.scheduling.errors import DeadlineExceeded

MAX_WAIT_S = 8.0
CAP_S = 1.0
BODY = {"texts": ["der hund"], "beam_size": 1}


@pytest.fixture(scope="module")
def held_server(tiny_repository, tmp_path_factory):
    env = {
        "MT_MAX_WAIT_MS": str(int(MAX_WAIT_S * 1000)),
        "MT_DISPATCH_WHEN_IDLE": "false",
        "MT_MAX_BATCH_SENTENCES": "64",
        "MT_MAX_REQUEST_TIMEOUT_S": str(CAP_S),
    }
    log_path = tmp_path_factory.mktemp("held") / "service.log"
    server = start_server(tiny_repository, env, log_path)
    yield server
    server.stop()


class Counters:
    """Before/after values of the metrics that show whether engine work ran."""

    NAMES = {
        "deadline": ("mt_dropped_requests_total", {"reason": "deadline"}),
        "disconnected": ("mt_dropped_requests_total", {"reason": "client_disconnected"}),
        "batches": ("mt_batch_size_count", {}),
        "inference": ("mt_inference_duration_seconds_count", {}),
        "504": ("mt_requests_total", {"status": "504"}),
    }

    def __init__(self, url: str) -> None:
        self.url = url
        self.before = self.read()

    def read(self) -> dict[str, float]:
        return {key: metric(self.url, name, **labels) for key, (name, labels) in self.NAMES.items()}

    def delta(self) -> dict[str, float]:
        after = self.read()
        return {key: after[key] - self.before[key] for key in after}


def _timed_post(url: str, body: dict, headers: dict | None = None) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.post(url + "/v1/translate", json=body, headers=headers or {}, timeout=30)
    return response, time.monotonic() - started


@pytest.mark.parametrize("how", ["body", "header"])
def test_deadline_passing_before_the_work_starts_504_without_engine_work(held_server, how):
    counters = Counters(held_server.url)
    if how == "body":
        response, elapsed = _timed_post(held_server.url, {**BODY, "timeout_s": 0.3})
    else:
        response, elapsed = _timed_post(held_server.url, BODY, {"X-Request-Timeout": "0.3"})
    assert response.status_code == 504
    assert "deadline passed before its work could start" in response.json()["detail"]
    assert elapsed < MAX_WAIT_S - 2.0  # answered at its deadline, not when the batcher would have run it
    assert counters.delta() == {"deadline": 1, "disconnected": 0, "batches": 0, "inference": 0, "504": 1}


def test_deadline_is_capped_by_the_server(held_server):
    counters = Counters(held_server.url)
    response, elapsed = _timed_post(held_server.url, {**BODY, "timeout_s": 100})
    assert response.status_code == 504
    assert CAP_S * 0.9 <= elapsed < MAX_WAIT_S - 2.0  # the cap (1 s), not the 100 s asked for
    assert counters.delta()["deadline"] == 1


def test_body_deadline_wins_over_the_header(held_server):
    """Body 100 s (capped to 1 s) against header 0.2 s: the answer comes at the cap, so the body's value ruled."""
    response, elapsed = _timed_post(held_server.url, {**BODY, "timeout_s": 100}, {"X-Request-Timeout": "0.2"})
    assert response.status_code == 504
    assert elapsed >= CAP_S * 0.9


def _wait_for_queue(url: str, depth: int) -> None:
    for _ in range(200):
        if metric(url, "mt_queue_depth", model="de-en") == depth:
            return
        time.sleep(0.02)
    raise AssertionError(f"queue depth never reached {depth}")


def test_client_disconnect_drops_the_queued_work(held_server):
    """A raw socket sends a request, waits until it is queued, and closes: the work is dropped, never run."""
    url = held_server.url
    counters = Counters(url)
    payload = json.dumps({"texts": ["der hund", "die katze"], "beam_size": 1}).encode()
    head = (
        f"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(head + payload)
        _wait_for_queue(url, 2)
    for _ in range(100):
        if counters.delta()["disconnected"] == 1:
            break
        time.sleep(0.02)
    _wait_for_queue(url, 0)
    time.sleep(CAP_S + 0.2)  # past its deadline too: it must not be counted twice
    delta = counters.delta()
    assert delta == {"deadline": 0, "disconnected": 1, "batches": 0, "inference": 0, "504": 0}, delta


def test_client_timeout_drops_the_queued_work(held_server):
    url = held_server.url
    counters = Counters(url)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/translate", json=BODY, timeout=httpx.Timeout(10, read=0.4))
    for _ in range(100):
        if counters.delta()["disconnected"] == 1:
            break
        time.sleep(0.02)
    delta = counters.delta()
    assert delta["disconnected"] == 1 and delta["batches"] == 0 and delta["inference"] == 0, delta


def test_openapi_documents_the_deadline(held_server):
    spec = httpx.get(held_server.url + "/openapi.json", timeout=30).json()
    for path in ("/v1/translate", "/v1/embed", "/v1/attention"):
        operation = spec["paths"][path]["post"]
        [header] = [p for p in operation.get("parameters", []) if p["name"] == "X-Request-Timeout"]
        assert header["in"] == "header" and f"capped at {CAP_S}" in header["description"]
        assert "504" in operation["responses"]
    timeout_s = spec["components"]["schemas"]["TranslateRequest"]["properties"]["timeout_s"]
    assert f"capped at {CAP_S}" in timeout_s["description"]


def test_deadline_fails_a_request_while_the_engine_is_busy():
    """A worker held by a long batch: a queued request still fails at its own deadline, not when the worker frees."""

    async def scenario():
        import threading

        gate, entered, seen = threading.Event(), threading.Event(), []

        def runner(key, payloads):
            seen.extend(payloads)
            entered.set()
            gate.wait(30)
            return payloads, {}

        metrics = Metrics()
        scheduler = dynamic_scheduler("m", runner, BatchLimits(max_sentences=8, max_wait_s=0.0, max_queue=64), metrics)
        scheduler.start()
        blocker = asyncio.ensure_future(scheduler.submit("k", ["blocker"], [1], 30))
        assert await asyncio.to_thread(entered.wait, 10)
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            await scheduler.submit("k", ["late"], [1], 0.2)
        waited = time.monotonic() - started
        gate.set()
        await blocker
        await scheduler.stop()
        dropped = metrics.registry.get_sample_value("mt_dropped_requests_total", {"model": "m", "reason": "deadline"})
        return waited, seen, dropped

    waited, seen, dropped = asyncio.run(scenario())
    assert waited < 5  # the worker was held for up to 30 s
    assert seen == ["blocker"] and dropped == 1
