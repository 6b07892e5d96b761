"""MT_LOG_REQUESTS_TEXT: request texts reach the access log only when asked for."""

from __future__ import annotations

import json

import httpx
from live_server import LiveServer

TEXT = "die katze sitzt auf dem ball"


def _access_lines(log: str) -> list[dict]:
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("logger") == "service.access"]


def test_texts_logged_only_when_enabled(tiny_repository, tmp_path):
    for enabled in (False, True):
        log_path = tmp_path / f"service-{enabled}.log"
        env = {"MT_LOG_REQUESTS_TEXT": "true" if enabled else "false"}
        with LiveServer(tiny_repository, env=env, log_path=log_path) as server:
            r = httpx.post(server.url + "/v1/translate", json={"texts": [TEXT], "beam_size": 1}, timeout=30)
            assert r.status_code == 200
        log = log_path.read_text()
        entries = [e for e in _access_lines(log) if e.get("endpoint") == "/v1/translate"]
        assert len(entries) == 1
        if enabled:
            assert entries[0]["texts"] == [TEXT]
        else:
            assert TEXT not in log and "texts" not in entries[0]
