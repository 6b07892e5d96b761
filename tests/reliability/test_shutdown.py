"""Graceful shutdown: SIGTERM while requests are queued: /readyz turns 503 at once, new requests get 503 with
Retry-After, every accepted request is answered, and the process exits 0 well within MT_DRAIN_SECONDS."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from reliability_helpers import log_entries, metric, start_server

MAX_WAIT_S = 5.0  # accepted work waits this long for its batch: the window in which SIGTERM arrives
DRAIN_S = 30
BODIES = [
    {"texts": ["der hund"], "beam_size": 1},
    {"texts": ["ein mann spielt", "die katze"], "beam_size": 2},
    {"texts": ["eine frau rennt im park"], "beam_size": 1},
    {"texts": ["das kind", "der ball", "ein hund sitzt"], "beam_size": 2},
]
SENTENCES = sum(len(b["texts"]) for b in BODIES)


def _post_all(url: str) -> list[httpx.Response]:
    with ThreadPoolExecutor(len(BODIES)) as pool:
        return list(pool.map(lambda b: httpx.post(url + "/v1/translate", json=b, timeout=60), BODIES))


def test_sigterm_drains_accepted_requests_then_exits_0(tiny_repository, tmp_path):
    env = {
        "MT_MAX_WAIT_MS": str(int(MAX_WAIT_S * 1000)),
        "MT_DISPATCH_WHEN_IDLE": "false",
        "MT_MAX_BATCH_SENTENCES": "64",
        "MT_DRAIN_SECONDS": str(DRAIN_S),
    }
    server = start_server(tiny_repository, env, tmp_path / "service.log")
    url = server.url
    try:
        expected = [[t["text"] for t in r.json()["translations"]] for r in _post_all(url)]

        with ThreadPoolExecutor(len(BODIES)) as pool:
            accepted = [pool.submit(httpx.post, url + "/v1/translate", json=b, timeout=60) for b in BODIES]
            for _ in range(200):  # every sentence is in the queue: the requests were accepted, none has run
                if metric(url, "mt_queue_depth", model="de-en") == SENTENCES:
                    break
                time.sleep(0.01)
            else:
                raise AssertionError("the requests were never all queued")

            server.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            readiness = []
            for _ in range(20):  # /readyz turns 503 at once (allow for the signal to be delivered)
                response = httpx.get(url + "/readyz", timeout=5)
                readiness.append(response.status_code)
                if response.status_code == 503:
                    break
                time.sleep(0.02)
            # "at once": while the accepted requests still wait for their batch (MAX_WAIT_S), not after them
            assert readiness[-1] == 503 and not any(f.done() for f in accepted), readiness
            assert time.monotonic() - signalled < MAX_WAIT_S
            assert response.json()["status"] == "draining" and int(response.headers["Retry-After"]) >= 1

            refused = httpx.post(url + "/v1/translate", json=BODIES[0], timeout=10)
            assert refused.status_code == 503
            assert int(refused.headers["Retry-After"]) >= 1
            assert "shutting down" in refused.json()["detail"]

            answers = [f.result() for f in accepted]
        assert [r.status_code for r in answers] == [200] * len(BODIES)
        assert [[t["text"] for t in r.json()["translations"]] for r in answers] == expected

        code = server.process.wait(DRAIN_S + 30)
        assert code == 0
        assert time.monotonic() - signalled < DRAIN_S  # it left once the work was done, not at the drain limit
    finally:
        server.stop()
    messages = [e["message"] for e in log_entries(server.log_path)]
    assert any("draining" in m for m in messages)
    assert not any("still in flight" in m for m in messages)
