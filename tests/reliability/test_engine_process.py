"""The engine in worker processes (MT_ENGINE_PROCESS=true, issue 57), through the real server on the shipped de-en
model: a worker process killed while it holds a whole batch is restarted (cause in mt_engine_restarts_total and in the
log, /readyz 503 then 200 within 10 s) and the batch is sent once more and answered as before; a stream whose live
decode dies ends with a 503 error event (or a 503 answer) and the next request is answered; under 16 closed-loop
clients three SIGSEGV kills leave no request hung, lost or crossed and every refusal a 503 with Retry-After
(bench/engine_faults.py, whose 64-client run is the issue's acceptance); a worker over MT_ENGINE_MEMORY_LIMIT_MB is
replaced between batches; SIGTERM drains the server and its worker process ends with it."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from reliability_helpers import log_entries, metric, start_server
from sse_events import stream_translate

from bench.engine_faults import engine_pids, report, run_faults

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
SENTENCES = [
    "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
    "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun.",
    "Ein Mädchen in einem Karateanzug bricht einen Stock mit einem Tritt.",
    "Fünf Leute in Winterjacken und mit Helmen stehen im Schnee mit Schneemobilen im Hintergrund.",
    "Leute reparieren das Dach eines Hauses.",
    "Ein hell gekleideter Mann fotografiert eine Gruppe von Männern in dunklen Anzügen und mit Hüten.",
    "Eine Gruppe von Menschen steht vor einem Iglu.",
    "Ein Junge in einem roten Trikot versucht, die Home Base zu erreichen.",
    "Ein Typ arbeitet an einem Gebäude.",
    "Ein Mann in einer Weste sitzt auf einem Stuhl und hält Magazine.",
    "Eine Mutter und ihr kleiner Sohn genießen einen schönen Tag im Freien.",
    "Männer, die Volleyball spielen, wobei ein Mann den Ball nicht trifft.",
    "Ein Hund rennt durch den Park.",
    "Die Katze sitzt auf dem Ball.",
    "Zwei Kinder spielen am Strand.",
    "Eine Frau liest ein Buch im Zug.",
]


def _server(tmp_path, **env: str):
    settings = {"MT_ENGINE_PROCESS": "true", "MT_MODELS": "de-en", "MT_MAX_WAIT_MS": "5", **env}
    return start_server(REPOSITORY, settings, tmp_path / "service.log")


def _worker(server) -> int | None:
    """The model's one engine worker process (None while there is none, or the old one still ends)."""
    pids = engine_pids(server.process.pid)
    return pids[0] if len(pids) == 1 else None


def _wait_for(predicate, what: str, seconds: float = 30.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"never happened within {seconds} s: {what}")


def _ready(url: str) -> bool:
    return httpx.get(url + "/readyz", timeout=5).status_code == 200


def _translate(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/translate", json=body, timeout=60)


def test_a_killed_worker_is_restarted_and_its_batch_answered_on_the_new_one(tmp_path):
    server = _server(tmp_path, MT_SCHEDULER="dynamic")
    try:
        url, body = server.url, {"texts": SENTENCES[:3]}
        alone = _translate(url, body)
        assert alone.status_code == 200
        first = _worker(server)
        taken = metric(url, "mt_queue_wait_seconds_count", model="de-en")
        os.kill(first, signal.SIGSTOP)  # the batch reaches the worker process and stays there
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(_translate, url, body)
            _wait_for(lambda: metric(url, "mt_queue_wait_seconds_count", model="de-en") > taken, "the batch ran")
            time.sleep(0.2)
            os.kill(first, signal.SIGKILL)
            ready_after = _wait_for(
                lambda: _ready(url) and _worker(server) not in (None, first), "ready on a new worker", 10
            )
            answer = held.result()
        assert answer.status_code == 200, answer.text
        assert answer.json()["translations"] == alone.json()["translations"]
        assert ready_after <= 10
        assert metric(url, "mt_engine_restarts_total", model="de-en", cause="SIGKILL") == 1
        assert metric(url, "mt_engine_retried_batches_total", model="de-en") == 1
        messages = [e["message"] for e in log_entries(server.log_path)]
        assert any(f"engine worker process {first} died (SIGKILL)" in m for m in messages)
        assert _translate(url, body).json()["translations"] == alone.json()["translations"]
        second = _worker(server)
    finally:
        server.stop()
    assert server.process.returncode == 0
    _wait_for(lambda: not Path(f"/proc/{second}").exists(), "the worker process ended with the server", 10)


def test_a_stream_whose_worker_dies_ends_with_an_error_and_the_next_request_is_answered(tmp_path):
    server = _server(tmp_path, MT_SCHEDULER="continuous")
    try:
        url, body = server.url, {"texts": [SENTENCES[3]]}
        alone = _translate(url, body)
        assert alone.status_code == 200
        first = _worker(server)
        os.kill(first, signal.SIGSTOP)
        with ThreadPoolExecutor(1) as pool:
            streamed = pool.submit(stream_translate, url, body, 60)
            time.sleep(0.5)
            os.kill(first, signal.SIGKILL)
            response, events = streamed.result()
        if events:
            assert response.status_code == 200
            event, data = events[-1]
            assert event == "error" and data["code"] == 503 and data["retry_after"] >= 1, events[-3:]
        else:
            assert response.status_code == 503 and int(response.headers["Retry-After"]) >= 1
        _wait_for(lambda: _ready(url), "ready again", 10)
        assert _translate(url, body).json()["translations"] == alone.json()["translations"]
        assert metric(url, "mt_engine_restarts_total", model="de-en", cause="SIGKILL") == 1
    finally:
        server.stop()


# continuous: requests without the n-gram block decode live (engine/chooser.py decodes_live); when their worker dies
# they join the new one's decode (they do not stream); the others run as whole batches, retried on the new worker
@pytest.mark.parametrize(
    ("scheduler", "fields"), [("dynamic", {}), ("continuous", {}), ("continuous", {"no_repeat_ngram_size": 0})]
)
def test_three_sigsegv_kills_under_load_leave_nothing_hung_lost_or_crossed(tmp_path, scheduler, fields):
    server = _server(tmp_path, MT_SCHEDULER=scheduler)
    try:
        load = run_faults(server.url, server.process.pid, SENTENCES, 16, 3, 1.0, 1.5, fields=fields)
        tally = asyncio.run(load)
        print(report(tally, 16, 3))
        assert tally.ok(), report(tally, 16, 3)
        assert tally.counts["answered"] > 0 and tally.restarts == 3 and len(tally.ready_after_s) == 3
        assert metric(server.url, "mt_engine_restarts_total", model="de-en", cause="SIGSEGV") == 3
    finally:
        server.stop()


def test_a_worker_over_its_memory_limit_is_replaced_between_batches(tmp_path):
    server = _server(tmp_path, MT_SCHEDULER="dynamic", MT_ENGINE_MEMORY_LIMIT_MB="1")
    try:
        url, body = server.url, {"texts": SENTENCES[:2]}
        first = _worker(server)
        answers = [_translate(url, body) for _ in range(3)]
        assert all(a.status_code == 200 for a in answers)
        assert answers[0].json()["translations"] == answers[2].json()["translations"]
        _wait_for(lambda: metric(url, "mt_engine_restarts_total", model="de-en", cause="memory") >= 1, "a recycle")
        _wait_for(lambda: _ready(url) and _worker(server) not in (None, first), "a new worker")
        messages = [e["message"] for e in log_entries(server.log_path)]
        assert any("over MT_ENGINE_MEMORY_LIMIT_MB=1: recycled" in m for m in messages)
    finally:
        server.stop()


def test_a_version_load_gets_its_own_worker_and_the_old_one_ends_as_does_an_unloaded_models(tmp_path):
    admin = {"X-Admin-Key": "s3cret"}
    server = _server(tmp_path, MT_ADMIN_KEY="s3cret", MT_MODEL_VERSIONS="de-en=2")
    try:
        url, body = server.url, {"texts": SENTENCES[:2]}
        old = _worker(server)
        assert _translate(url, body).json()["version"] == "2"
        loaded = httpx.post(url + "/v1/models/de-en/load", headers=admin, json={"version": "3"}, timeout=120)
        assert loaded.status_code == 200, loaded.text
        _wait_for(lambda: not _alive(old), "the old version's worker process ended")
        new = _worker(server)
        assert new not in (None, old)
        answer = _translate(url, body)
        assert answer.status_code == 200 and answer.json()["version"] == "3"
        unloaded = httpx.post(url + "/v2/repository/models/de-en/unload", headers=admin, timeout=120)
        assert unloaded.status_code == 200, unloaded.text
        _wait_for(lambda: not _alive(new), "the unloaded model's worker process ended")
        assert engine_pids(server.process.pid) == []
    finally:
        server.stop()


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
