"""Versions swapped without downtime: the admin call and SIGHUP load a new version under load with no error and
no lost answer; each answer names the one version that produced it; a bad new version is refused while the old
one serves; the admin call needs the admin key. Also: one model's overload does not refuse or slow the other's."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest
from bundle_copies import copy_bundle, two_model_repository
from fault_injection import COMMAND, SLOW_BATCH_MARKER
from reliability_helpers import start_server

ADMIN = {"X-Admin-Key": "s3cret"}
TEXTS = ["der hund", "ein mann spielt", "die katze", "das kind rennt", "eine frau"]


@pytest.fixture
def versioned(tiny_bundle_dir, tmp_path):
    """A repository with de-en version 1 only, and a server with an admin key; the test adds versions."""
    repository = tmp_path / "repository"
    copy_bundle(tiny_bundle_dir, repository / "de-en" / "1")
    server = start_server(repository, {"MT_ADMIN_KEY": "s3cret", "MT_MAX_WAIT_MS": "5"}, tmp_path / "service.log")
    yield server, repository
    server.stop()


async def _load_while_clients_run(url: str, clients: int, swap) -> tuple[list[httpx.Response], httpx.Response]:
    stop = asyncio.Event()
    answers: list[httpx.Response] = []

    async def client(i: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            n = 0
            while not stop.is_set() or n < 3:
                body = {"texts": [TEXTS[(i + n) % len(TEXTS)], TEXTS[n % len(TEXTS)]], "beam_size": 1 + (i % 2)}
                answers.append(await http.post("/v1/translate", json=body))
                n += 1

    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    await asyncio.sleep(1.0)
    swapped = await swap()
    await asyncio.sleep(1.0)
    stop.set()
    await asyncio.gather(*tasks)
    return answers, swapped


def test_admin_load_swaps_the_version_under_a_16_client_load(versioned, tiny_bundle_dir):
    server, repository = versioned
    copy_bundle(tiny_bundle_dir, repository / "de-en" / "2", version=2)

    async def swap():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
            return await http.post("/v1/models/de-en/load", headers=ADMIN)

    answers, swapped = asyncio.run(_load_while_clients_run(server.url, 16, swap))
    assert swapped.status_code == 200, swapped.text
    assert swapped.json()["version"] == "2" and swapped.json()["previous_version"] == "1"
    statuses = [a.status_code for a in answers]
    assert statuses and set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
    versions = []
    for a in answers:
        body = a.json()
        inner = {t["version"] for t in body["translations"]}
        assert inner == {body["version"]}, body  # one version produced the whole answer
        assert len(body["translations"]) == 2  # nothing lost
        versions.append(body["version"])
    assert "1" in versions and "2" in versions  # answers from before and after the swap
    last = versions[-16:]
    assert set(last) == {"2"}
    info = httpx.get(server.url + "/v1/models", timeout=10).json()["models"][0]
    assert info["version"] == "2" and info["versions_available"] == ["1", "2"]
    assert info["version_reason"] == "loaded by POST /v1/models/de-en/load"


def test_a_corrupt_new_version_is_refused_and_the_old_one_serves_on(versioned, tiny_bundle_dir):
    server, repository = versioned
    bad = copy_bundle(tiny_bundle_dir, repository / "de-en" / "3", version=3)
    graph = next(bad.rglob("*.onnx"))
    graph.write_bytes(graph.read_bytes()[:-100])  # truncated after sealing
    response = httpx.post(server.url + "/v1/models/de-en/load", headers=ADMIN, timeout=120)
    assert response.status_code == 422
    assert "refused" in response.json()["detail"] and "version 1 serves on" in response.json()["detail"]
    answer = httpx.post(server.url + "/v1/translate", json={"texts": ["der hund"]}, timeout=60)
    assert answer.status_code == 200 and answer.json()["version"] == "1"
    missing = httpx.post(server.url + "/v1/models/de-en/load", headers=ADMIN, json={"version": "9"}, timeout=60)
    assert missing.status_code == 404
    unknown = httpx.post(server.url + "/v1/models/xx-yy/load", headers=ADMIN, timeout=60)
    assert unknown.status_code == 404


def test_the_admin_call_needs_the_admin_key(versioned, live_server):
    server, _ = versioned
    for headers in ({}, {"X-Admin-Key": "wrong"}):
        response = httpx.post(server.url + "/v1/models/de-en/load", headers=headers, timeout=60)
        assert response.status_code == 403 and "admin key" in response.json()["detail"]
    off = httpx.post(live_server.url + "/v1/models/de-en/load", headers=ADMIN, timeout=60)  # no MT_ADMIN_KEY there
    assert off.status_code == 403 and "MT_ADMIN_KEY" in off.json()["detail"]


def test_sighup_loads_the_highest_version(versioned, tiny_bundle_dir):
    server, repository = versioned
    copy_bundle(tiny_bundle_dir, repository / "de-en" / "2", version=2)
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = httpx.post(server.url + "/v1/translate", json={"texts": ["der hund"]}, timeout=60)
        assert answer.status_code == 200
        if answer.json()["version"] == "2":
            break
        time.sleep(0.2)
    else:
        raise AssertionError("SIGHUP did not load version 2")
    info = httpx.get(server.url + "/v1/models", timeout=10).json()["models"][0]
    assert info["version_reason"] == "loaded on SIGHUP"


def test_one_models_overload_does_not_refuse_or_slow_the_other(tiny_bundle_dir, tmp_path):
    """zh-en is flooded far beyond its small queue with slow batches; de-en answers every request, promptly."""
    repository = two_model_repository(tiny_bundle_dir, tmp_path)
    env = {"MT_MAX_QUEUE_SENTENCES": "8", "MT_MAX_WAIT_MS": "5", "MT_ENGINE_WORKERS": "1"}
    server = start_server(repository, env, tmp_path / "service.log", command=COMMAND)
    try:
        flood_body = {"texts": [f"x {SLOW_BATCH_MARKER}"] * 4, "model": "zh-en", "beam_size": 2}

        async def run():
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
                alone = []
                for _ in range(5):
                    t = time.monotonic()
                    assert (await http.post("/v1/translate", json={"texts": ["der hund"]})).status_code == 200
                    alone.append(time.monotonic() - t)
                flood = [asyncio.create_task(http.post("/v1/translate", json=flood_body)) for _ in range(60)]
                await asyncio.sleep(0.05)
                during = []
                for _ in range(10):
                    t = time.monotonic()
                    response = await http.post("/v1/translate", json={"texts": ["der hund"], "model": "de-en"})
                    during.append((response.status_code, time.monotonic() - t))
                flooded = await asyncio.gather(*flood)
                return alone, during, [r.status_code for r in flooded]

        alone, during, flooded = asyncio.run(run())
        assert 429 in flooded  # the flooded model did shed load
        assert {status for status, _ in during} == {200}
        # de-en's own work is a few ms; the flood's batches sleep 50 ms each: de-en must not wait behind them
        assert max(seconds for _, seconds in during) < max(alone) + 1.0, (alone, during)
    finally:
        server.stop()
