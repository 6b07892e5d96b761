"""Engine worker processes under fire (issue 57): closed-loop clients translate while the engine's worker process is
killed with SIGSEGV, and every request is accounted for.

A server with MT_ENGINE_PROCESS=true serves the clients (bench/raw_client.py connections, one sentence each, every
request a different sentence of the source file). After a warm-up each of ``--kills`` rounds sends SIGSEGV to the
model's engine worker process (a child of the server running service.execution.engine_process), then times how
long /readyz takes to answer 200 again with a new worker process. Each request ends as one of:

- answered: 200 with the translation of its own sentence (its ``source_tokens`` are those of the sentence sent;
  its text is the one the quiet server gave that sentence before the load, else it also counts as ``differing``);
- crossed: 200 whose source tokens, or text, belong to another sentence;
- refused: 503 with a Retry-After header (``refused_without_retry_after`` counts any without one);
- other: any other status; lost: the connection closed without an answer; hung: no answer within ``--hang-s``.

``retried`` is the server's own count of whole batches (and live decodes' sentences) it sent again to the new
worker process (mt_engine_retried_batches_total). Acceptance (issue 57): 0 hung, 0 lost, 0 crossed, 0 other,
every refusal with Retry-After, each kill ready again within 10 s.

    python -m bench.engine_faults --clients 64 --kills 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.harness import ROOT, ServerProcess, machine, now
from bench.raw_client import RawConnection

READY_WITHIN_S = 10.0
RETRY_AFTER = re.compile(rb"\r\nretry-after:[ \t]*(\d+)", re.IGNORECASE)


def engine_pids(server_pid: int) -> list[int]:
    """The server's engine worker processes (its children running service.execution.engine_process)."""
    found: list[int] = []
    for task in os.listdir(f"/proc/{server_pid}/task"):
        try:
            children = Path(f"/proc/{server_pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for pid in map(int, children):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"service.execution.engine_process" in command:
                found.append(pid)
    return sorted(found)


def metric_total(url: str, name: str) -> float:
    """Sum of every sample of ``name`` on /metrics."""
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    ready_after_s: list[float] = field(default_factory=list)
    retried: float = 0.0
    restarts: float = 0.0

    def ok(self) -> bool:
        c = self.counts
        bad = c["crossed"] + c["hung"] + c["lost"] + c["other"] + c["refused_without_retry_after"]
        return bad == 0 and all(s <= READY_WITHIN_S for s in self.ready_after_s)


async def reference(url: str, sentences: list[str], fields: dict) -> dict[str, tuple[list[str], str]]:
    """Each sentence's (source tokens, text) from the quiet server, one request each."""
    conn, known = RawConnection(url), {}
    for sentence in dict.fromkeys(sentences):
        status, body = await conn.post_json("/v1/translate", {"texts": [sentence], **fields})
        assert status == 200, body[:300]
        t = json.loads(body)["translations"][0]
        known[sentence] = (t["source_tokens"], t["text"])
    await conn.close()
    return known


async def _client(i: int, url: str, sentences: list[str], known, tally: Tally, stop: asyncio.Event, hang_s: float,
                  fields: dict):  # fmt: skip
    conn, n = RawConnection(url), 0
    by_text = {text: s for s, (_, text) in known.items()}
    while not stop.is_set():
        sentence = sentences[(i * 7919 + n) % len(sentences)]
        n += 1
        try:
            request = conn.post_json("/v1/translate", {"texts": [sentence], **fields})
            status, body = await asyncio.wait_for(request, hang_s)
        except TimeoutError:
            tally.counts["hung"] += 1
            await conn.close()
            continue
        except (OSError, asyncio.IncompleteReadError, ValueError):
            tally.counts["lost"] += 1
            await conn.close()
            continue
        if status == 200:
            t = json.loads(body)["translations"][0]
            tokens, text = known[sentence]
            if t["source_tokens"] != tokens or (t["text"] != text and by_text.get(t["text"], sentence) != sentence):
                tally.counts["crossed"] += 1
            else:
                tally.counts["answered"] += 1
                tally.counts["differing"] += t["text"] != text
        elif status == 503:
            tally.counts["refused" if RETRY_AFTER.search(conn.head) else "refused_without_retry_after"] += 1
        else:
            tally.counts["other"] += 1
            tally.counts[f"status_{status}"] += 1
    await conn.close()


def _ready_again(url: str, server_pid: int, old: int, limit_s: float) -> float:
    """Seconds from now until /readyz answers 200 with a worker process other than ``old``; inf past ``limit_s``."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        pids = engine_pids(server_pid)
        try:
            ready = httpx.get(url + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            ready = False
        if ready and pids and old not in pids:
            return time.monotonic() - started
        time.sleep(0.02)
    return float("inf")


async def run_faults(
    url: str, server_pid: int, sentences: list[str], clients: int, kills: int, warmup_s: float = 3.0,
    between_s: float = 3.0, hang_s: float = 30.0, fields: dict | None = None,
) -> Tally:  # fmt: skip
    """``clients`` closed-loop clients; ``kills`` SIGSEGVs of the engine worker process, ``between_s`` apart;
    ``fields``: more fields of each request (``no_repeat_ngram_size`` 0: the continuous scheduler decodes it live)."""
    fields = fields or {}
    known = await reference(url, sentences, fields)
    retried = metric_total(url, "mt_engine_retried_batches_total")
    restarts = metric_total(url, "mt_engine_restarts_total")
    tally, stop = Tally(), asyncio.Event()
    tasks = [
        asyncio.create_task(_client(i, url, sentences, known, tally, stop, hang_s, fields)) for i in range(clients)
    ]
    await asyncio.sleep(warmup_s)
    for _ in range(kills):
        [pid] = engine_pids(server_pid)
        os.kill(pid, signal.SIGSEGV)
        tally.ready_after_s.append(await asyncio.to_thread(_ready_again, url, server_pid, pid, 60.0))
        await asyncio.sleep(between_s)
    stop.set()
    await asyncio.gather(*tasks)
    tally.retried = metric_total(url, "mt_engine_retried_batches_total") - retried
    tally.restarts = metric_total(url, "mt_engine_restarts_total") - restarts
    return tally


def report(tally: Tally, clients: int, kills: int) -> str:
    c = tally.counts
    rows = [
        ("clients", clients), ("SIGSEGV kills", kills), ("restarts counted", f"{tally.restarts:g}"),
        ("answered (200, own sentence)", c["answered"]), ("  of them differing from the quiet answer", c["differing"]),
        ("retried (whole batches sent again)", f"{tally.retried:g}"), ("refused (503 + Retry-After)", c["refused"]),
        ("refused without Retry-After", c["refused_without_retry_after"]), ("hung", c["hung"]), ("lost", c["lost"]),
        ("crossed", c["crossed"]), ("other status", c["other"]),
        ("ready again after each kill, s", ", ".join(f"{s:.2f}" for s in tally.ready_after_s)),
        ("verdict", "PASS" if tally.ok() else "FAIL"),
    ]  # fmt: skip
    return "\n".join(["| count | value |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows)])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.engine_faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    p.add_argument("--model", default="de-en")
    p.add_argument("--source-file", type=Path, default=ROOT.parent / "shared/data/multi30k/test_2016_flickr.de")
    p.add_argument("--sentences", type=int, default=500, help="distinct sentences the clients cycle through")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--warmup-s", type=float, default=3.0)
    p.add_argument("--between-s", type=float, default=5.0, help="load after each restart before the next kill")
    p.add_argument("--scheduler", default="dynamic", choices=("dynamic", "continuous"))
    p.add_argument(
        "--live", action="store_true", help="requests without the n-gram block, so that continuous batching decodes "
        "them live (when their worker dies they join the new one's decode, as whole batches are sent again)",
    )  # fmt: skip
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lines = [s.strip() for s in args.source_file.read_text(encoding="utf-8").splitlines() if s.strip()]
    sentences = list(dict.fromkeys(lines))[: args.sentences]
    live = ", live decode (no_repeat_ngram_size 0)" if args.live else ""
    print(f"{machine()}\n{now()}; {len(sentences)} sentences, MT_SCHEDULER={args.scheduler}{live}", flush=True)
    env = {"MT_ENGINE_PROCESS": "true", "MT_MODELS": args.model, "MT_DEFAULT_MODEL": args.model,
           "MT_SCHEDULER": args.scheduler, "MT_MAX_QUEUE_SENTENCES": str(max(1024, 4 * args.clients))}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-engine-faults-") as tmp:
        server = ServerProcess(args.repository, {**env, "MT_STATE_DIR": tmp}, Path(tmp) / "service.log").start(300)
        try:
            tally = asyncio.run(
                run_faults(server.url, server.pid, sentences, args.clients, args.kills, args.warmup_s, args.between_s,
                           fields={"no_repeat_ngram_size": 0} if args.live else None)
            )  # fmt: skip
        finally:
            server.stop()
    print(report(tally, args.clients, args.kills))
    return 0 if tally.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
