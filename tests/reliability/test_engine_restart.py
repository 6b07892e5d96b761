"""Engine faults contained, through the real server with dynamic and with continuous batching: an engine that dies
mid-decode (a batch with CRASH_ENGINE_MARKER breaks every session of the engine; tests/fault_injection.py) fails only
the work it held, with 503 and Retry-After; /readyz answers 503 while the engine is rebuilt, then 200; work sent
meanwhile waits and is answered by the new engine, as is later work and the failed request sent again;
mt_engine_restarts_total counts one restart; the process stays up."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from fault_injection import COMMAND as FAULT_INJECTING_COMMAND
from fault_injection import CRASH_ENGINE_MARKER, FAIL_BATCH_MARKER
from reliability_helpers import log_entries, metric, start_server
from sse_events import stream_translate

LONG = "eine kleine rote katze sitzt unter dem blauen ball und ein hund rennt im park"
HELD = {"texts": [LONG], "beam_size": 2}  # decodes for seconds with slowed steps: mid-decode when the engine dies
RESTART_DELAY_S = 3.0  # the rebuilt engine takes this much longer to start: time to watch /readyz
OTHERS = {
    "greedy": ("/v1/translate", {"texts": ["der hund", "ein mann spielt"], "beam_size": 1}),
    "beam": ("/v1/translate", {"texts": ["die katze sitzt auf dem ball"], "beam_size": 3}),
    "embed": ("/v1/embed", {"texts": ["der hund", "die katze"]}),
    "attention": ("/v1/attention", {"source": "der ball", "kinds": ["cross"]}),
}


@pytest.fixture(params=["dynamic", "continuous"])
def server(request, tiny_repository, tmp_path):
    env = {
        "MT_SCHEDULER": request.param,
        "MT_ENGINE_WORKERS": "3",  # dynamic: the crash runs beside the held decode, not after it
        "MT_MAX_WAIT_MS": "5",
        "MT_TEST_STEP_DELAY_S": "0.15",
        "MT_TEST_RESTART_DELAY_S": str(RESTART_DELAY_S),
    }
    server = start_server(tiny_repository, env, tmp_path / "service.log", command=FAULT_INJECTING_COMMAND)
    yield server
    server.stop()


def _post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120)


def _same(path: str, got: dict, want: dict) -> None:
    """The same answer up to float rounding (batch companions may differ from the answer alone)."""
    if path == "/v1/translate":
        assert [(t["text"], t["target_tokens"]) for t in got["translations"]] == [
            (t["text"], t["target_tokens"]) for t in want["translations"]
        ]
        assert [t["score"] for t in got["translations"]] == pytest.approx(
            [t["score"] for t in want["translations"]], abs=1e-4
        )
    elif path == "/v1/embed":
        np.testing.assert_allclose(got["embeddings"], want["embeddings"], atol=1e-4)
    else:
        assert got["target_tokens"] == want["target_tokens"]
        np.testing.assert_allclose(got["cross"], want["cross"], atol=1e-4)


def _wait_for(predicate, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"never happened within {seconds} s: {what}")


def _assert_503_with_retry_after(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) >= 1
    assert "restarted" in response.json()["detail"]


def test_a_dead_engine_fails_only_the_work_it_held_and_comes_back(server):
    url = server.url
    alone = {name: _post(url, path, body).json() for name, (path, body) in OTHERS.items()}
    held_alone = _post(url, "/v1/translate", HELD).json()
    assert metric(url, "mt_engine_restarts_total", model="de-en") == 0
    started = metric(url, "mt_queue_wait_seconds_count", model="de-en")
    readiness: list[tuple[int, str]] = []

    def ready_status() -> int:
        response = httpx.get(url + "/readyz", timeout=10)
        readiness.append((response.status_code, response.json()["status"]))
        return response.status_code

    with ThreadPoolExecutor(8) as pool:
        held = pool.submit(_post, url, "/v1/translate", HELD)
        streamed = pool.submit(stream_translate, url, HELD, 120)
        _wait_for(
            lambda: metric(url, "mt_queue_wait_seconds_count", model="de-en") - started >= 2, "the held work started"
        )
        crash = pool.submit(_post, url, "/v1/embed", {"texts": [f"der hund {CRASH_ENGINE_MARKER}"]})
        _wait_for(lambda: ready_status() == 503, "/readyz 503 while the engine restarts", 30)
        during = {name: pool.submit(_post, url, path, body) for name, (path, body) in OTHERS.items()}
        _wait_for(lambda: ready_status() == 200, "/readyz 200 once the engine is back", 120)
        crash, held, (stream_response, events) = crash.result(), held.result(), streamed.result()
        during = {name: future.result() for name, future in during.items()}

    # the work the dead engine held: 503 with Retry-After (a stream that had begun ends with the same error event)
    _assert_503_with_retry_after(crash)
    _assert_503_with_retry_after(held)
    if events:
        assert stream_response.status_code == 200
        event, data = events[-1]
        assert event == "error" and data["code"] == 503 and data["retry_after"] >= 1, events[-3:]
    else:
        _assert_503_with_retry_after(stream_response)
    assert any(code == 503 and status == "engine restarting after a fault: de-en" for code, status in readiness)

    # work sent while the engine restarted waited for the new engine; later work and the retry are answered too
    for name, (path, _) in OTHERS.items():
        assert during[name].status_code == 200, (name, during[name].text)
        _same(path, during[name].json(), alone[name])
        later = _post(url, path, OTHERS[name][1])
        assert later.status_code == 200
        _same(path, later.json(), alone[name])
    retried = _post(url, "/v1/translate", HELD)
    assert retried.status_code == 200
    _same("/v1/translate", retried.json(), held_alone)

    assert metric(url, "mt_engine_restarts_total", model="de-en") == 1
    assert server.process.poll() is None
    messages = [e["message"] for e in log_entries(server.log_path)]
    assert any("fails its probe" in m for m in messages) and any("engine restarted" in m for m in messages)


def test_a_failing_batch_on_a_working_engine_is_not_a_restart(strict_server):
    """Guarantee 7's fault (a batch that raises while the engine works) keeps its 500 and restarts nothing."""
    url = strict_server.url
    before = metric(url, "mt_engine_restarts_total", model="de-en")
    failed = _post(url, "/v1/translate", {"texts": [f"der hund {FAIL_BATCH_MARKER}"]})
    assert failed.status_code == 500
    assert httpx.get(url + "/readyz", timeout=10).status_code == 200
    assert metric(url, "mt_engine_restarts_total", model="de-en") == before
