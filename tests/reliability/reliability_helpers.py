"""Shared helpers of the reliability tests: small limits, metric parsing, JSON log reading."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
from live_server import LiveServer

START_TIMEOUT = 240.0  # seconds for a server to become ready: generous, the CI machine is shared

# Every request is cheap under these limits, and each limit is easy to reach from a test.
SMALL_LIMITS = {
    "MT_MAX_TEXTS_TRANSLATE": "4",
    "MT_MAX_TEXTS_EMBED": "4",
    "MT_MAX_CHARS_PER_TEXT": "200",
    "MT_MAX_TOKENS_PER_TEXT": "40",
    "MT_MAX_LENGTH_CAP": "20",
    "MT_MAX_BEAM_SIZE": "4",
}


def start_server(repository: Path, env: dict[str, str], log_path: Path, command: list[str] | None = None) -> LiveServer:
    """A ready LiveServer; stopped again (not left running) when it does not become ready."""
    server = LiveServer(repository, env=env, log_path=log_path, command=command)
    try:
        server.start(timeout=START_TIMEOUT)
    except BaseException:
        server.stop()
        raise
    return server


def metric(url: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` (exact series name) whose labels include ``labels``; 0 when absent."""
    text = httpx.get(url + "/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(3) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(4))
    return total


def log_entries(path: Path) -> list[dict]:
    """Every line of a server log parsed as JSON (fails on a line that is not JSON)."""
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entries.append(json.loads(line))
    return entries


def rss_mb(pid: int) -> float:
    """VmRSS of a process, MiB."""
    match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    assert match, f"no VmRSS for pid {pid}"
    return int(match.group(1)) / 1024


# one request of 4 texts fills a queue of 4 sentences and waits MT_MAX_WAIT_MS for companions that cannot come (the
# idle engine does not take it at once: MT_DISPATCH_WHEN_IDLE=false)
FULL_QUEUE_ENV = {
    "MT_MAX_QUEUE_SENTENCES": "4",
    "MT_MAX_BATCH_SENTENCES": "64",
    "MT_MAX_WAIT_MS": "3000",
    "MT_DISPATCH_WHEN_IDLE": "false",
}


@contextmanager
def full_queue(url: str):
    """The de-en queue of a server started with FULL_QUEUE_ENV, filled by one held request; yields that
    request's future (answered once MT_MAX_WAIT_MS has passed)."""
    holder = {"texts": ["der hund", "die katze", "ein mann", "das kind"], "beam_size": 1}
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(httpx.post, url + "/v1/translate", json=holder, timeout=60)
        for _ in range(300):
            if metric(url, "mt_queue_depth", model="de-en") == 4:
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the holder never filled the queue")
        yield held
