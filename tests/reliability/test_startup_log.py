"""What a newcomer reads at INFO when the service starts: plain sentences about what is served, nothing to decode
(issue 55: "listen backlog 1234 (uvicorn's default 2048) so that ..." and "fused step not used (MT_FUSED_STEP=auto):
..." at INFO). Every INFO line of a default start must match one of these; warnings are for things to act on and
are not limited here."""

from __future__ import annotations

import re

import httpx
from live_server import LiveServer
from reliability_helpers import log_entries

STARTUP_INFO = [
    ("uvicorn.error", r"Started server process \[\d+\]"),
    ("uvicorn.error", r"Waiting for application startup\."),
    ("uvicorn.error", r"Application startup complete\."),
    ("uvicorn.error", r"Uvicorn running on http://\S+ \(Press CTRL\+C to quit\)"),
    ("engine.fused_step", r"[\w.-]+ \w+: whole-batch search on the fused step"),  # where `make native` built it
    ("service.models.registry", r"model [\w.-]+: serving version \S+ \(.*\)"),
    ("service.models.registry", r"model [\w.-]+ v\S+ ready \(.*\)"),
]


def unexpected_info(entries: list[dict]) -> list[str]:
    lines = [e for e in entries if e.get("level") == "info" and e.get("logger") != "service.access"]
    return [
        f"{e.get('logger')}: {e.get('message')}"
        for e in lines
        if not any(e.get("logger") == lg and re.fullmatch(p, e.get("message", "")) for lg, p in STARTUP_INFO)
    ]


def test_a_default_start_logs_only_plain_sentences_at_info(tiny_repository, tmp_path):
    log_path = tmp_path / "service.log"
    with LiveServer(tiny_repository, log_path=log_path) as server:
        assert httpx.post(server.url + "/v1/translate", json={"texts": ["der hund"]}, timeout=60).status_code == 200
        entries = log_entries(log_path)
    assert unexpected_info(entries) == []
    assert any(re.fullmatch(STARTUP_INFO[-1][1], e["message"]) for e in entries)  # the lines above were read


def test_the_check_names_a_line_it_does_not_know():
    noise = {"level": "info", "logger": "service", "message": "listen backlog 1234 (uvicorn's default 2048) so that"}
    known = {"level": "info", "logger": "uvicorn.error", "message": "Application startup complete."}
    assert unexpected_info([noise, known]) == ["service: listen backlog 1234 (uvicorn's default 2048) so that"]
