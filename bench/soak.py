"""Soak: a mixed load for a long time, and whether the server's memory, descriptors and threads stay flat.

Starts the real service (``python -m service`` serving only de-en, with default settings otherwise) or uses a
running one (``--url`` and its ``--pid``), then for ``--duration`` seconds ``--clients`` concurrent clients send
a mixed load (bench/soak_mix.py): translate greedy and beam 4, embed, attention, streaming translate, bad inputs
(each must get its 4xx), clients leaving mid-request and mid-stream. Every answer is checked; anything other
than the expected answer is an unexpected error (every other kind must get 200, and a translation must equal the
first answer to the same request).

Every ``--interval`` seconds the clients finish their requests and close their connections, and once the server
has nothing in flight and its descriptors stop changing, its RSS, open descriptors and threads are read from
/proc/<pid>: quiet samples that open client connections do not blur. Queue depth and requests in flight are the
largest seen during the interval (/metrics, every second); p99 latency and counts are per kind and interval.

Writes soak.json, soak.md and soak.png to ``--output-dir`` and, unless ``--no-write``, the table and curve to
docs/reliability.md and docs/images/soak.png. The verdict (bench/soak_report.py): RSS and descriptors grow less
than 10% from the end of the first interval to the end, every kind was sent, 0 unexpected answers; the exit
status is non-zero when it fails.

    python -m bench.soak --source-file ../shared/data/multi30k/test_2016_flickr.de --duration 3600 --interval 60
    python -m bench.soak --url http://127.0.0.1:8000 --pid 1234 --duration 600 --interval 30 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import ROOT, ServerProcess, command_line, percentile, proc_status, write_section
from bench.reliability_harness import DOC, passed, report_header, sentences, server_parser, verdict_line
from bench.soak_mix import CLOSED, KINDS, SERVED_KINDS, Mix, Outcome
from bench.soak_report import MAX_GROWTH, counts_table, plot, table, verdict

IMAGE = ROOT / "docs" / "images" / "soak.png"
RECORD = ROOT / "docs" / "soak.json"


async def read_metrics(client: httpx.AsyncClient) -> dict[str, dict[tuple, float]]:
    """The samples of /metrics: series name -> {sorted label pairs: value}."""
    r = await client.get("/metrics")
    r.raise_for_status()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def total(metrics: dict[str, dict[tuple, float]], name: str) -> float:
    return sum(metrics.get(name, {}).values())


async def run_interval(url: str, mix: Mix, clients: int, seconds: float, timeout: float) -> tuple[list, dict]:
    """``clients`` closed-loop clients for ``seconds``; each finishes its last request, then all connections close.
    Returns the outcomes and the largest queue depth and requests in flight seen on /metrics (every second)."""
    stop_at = time.perf_counter() + seconds
    outcomes: list[Outcome] = []
    gauges = {"queue_depth_max": 0.0, "in_flight_max": 0.0}
    limits = httpx.Limits(max_connections=2 * clients, max_keepalive_connections=2 * clients)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while time.perf_counter() < stop_at:
            outcomes.append(await mix.run(mix.choose(), client))

    async def watch() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
            while time.perf_counter() < stop_at:
                began = time.perf_counter()
                try:
                    metrics = await read_metrics(client)
                except httpx.HTTPError as exc:
                    at = round(began - mix.started, 3)
                    outcomes.append(Outcome(at, "metrics", type(exc).__name__, 0.0, f"/metrics: {exc!r}"))
                else:
                    gauges["queue_depth_max"] = max(gauges["queue_depth_max"], total(metrics, "mt_queue_depth"))
                    in_flight = total(metrics, "mt_requests_in_flight") - 1  # less this /metrics request
                    gauges["in_flight_max"] = max(gauges["in_flight_max"], in_flight)
                await asyncio.sleep(max(0.0, min(1.0, stop_at - time.perf_counter())))

    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        await asyncio.gather(watch(), *(client_loop(client) for _ in range(clients)))
    return outcomes, gauges


async def quiet_status(url: str, pid: int, timeout: float = 20.0) -> dict[str, Any] | None:
    """/proc status once the server has nothing in flight and its descriptor count held for 0.5 s (or after
    ``timeout``; 'settled' says which). None when the process is gone."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        while True:
            try:
                idle = total(await read_metrics(client), "mt_requests_in_flight") <= 1  # only this request
            except httpx.HTTPError:
                idle = False
            await asyncio.sleep(0.5)
            status = proc_status(pid)
            if status is None:
                return None
            if idle and last is not None and status["fds"] == last["fds"]:
                return {**status, "settled": True}
            if time.monotonic() > deadline:
                return {**status, "settled": False}
            last = status


def summarize(index: int, at_s: float, outcomes: list[Outcome], gauges: dict, status: dict) -> dict[str, Any]:
    requests: dict[str, dict[str, int]] = {}
    for o in outcomes:
        requests.setdefault(o.kind, {})[o.status] = requests.setdefault(o.kind, {}).get(o.status, 0) + 1
    p99 = {}
    for kind in SERVED_KINDS:
        latencies = [o.latency_s * 1000 for o in outcomes if o.kind == kind and o.status != CLOSED]
        if latencies:
            p99[kind] = round(percentile(latencies, 99), 1)
    return {
        "interval": index,
        "end_s": round(at_s, 1),
        "rss_mb": round(status["rss_mb"], 1),
        "fds": status["fds"],
        "threads": status["threads"],
        "settled": status["settled"],
        **gauges,
        "requests": requests,
        "p99_ms": p99,
        "unexpected": sum(o.problem is not None for o in outcomes),
    }


async def soak(server: ServerProcess, args: argparse.Namespace) -> tuple[list[dict], list[Outcome], dict]:
    """The whole soak: samples, the unexpected outcomes, and the server's drop counters at the end."""
    started = time.perf_counter()
    mix = Mix(sentences(args.source_file, 64, seed=args.seed), started, seed=args.seed)
    samples: list[dict] = []
    unexpected: list[Outcome] = []
    intervals = max(1, math.ceil(args.duration / args.interval - 1e-9))
    for index in range(1, intervals + 1):
        outcomes, gauges = await run_interval(server.url, mix, args.clients, args.interval, args.timeout)
        unexpected += [o for o in outcomes if o.problem is not None]
        status = await quiet_status(server.url, server.pid)
        if status is None:
            unexpected.append(Outcome(round(time.perf_counter() - started, 3), "server", "gone", 0.0, "server died"))
            break
        sample = summarize(index, time.perf_counter() - started, outcomes, gauges, status)
        samples.append(sample)
        print(
            f"[{sample['end_s'] / 60:5.1f} min] RSS {sample['rss_mb']:.1f} MiB, {sample['fds']} fds, "
            f"{sample['threads']} threads, queue max {sample['queue_depth_max']:g}, {len(outcomes)} requests, "
            f"{sample['unexpected']} unexpected; p99 ms {sample['p99_ms']}",
            flush=True,
        )
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        metrics = await read_metrics(client)
    counters = {
        "dropped_requests": {
            dict(k).get("reason", ""): v for k, v in metrics.get("mt_dropped_requests_total", {}).items()
        },
        "requests_in_flight": total(metrics, "mt_requests_in_flight") - 1,
    }
    return samples, unexpected, counters


def report(args, server, samples, unexpected, counters, checks, image: str) -> str:
    lines = [
        *report_header("Soak (bench/soak.py)", "bench.soak", args, server),
        f"- load: {args.clients} concurrent closed-loop clients for {args.duration:g} s, sampled every "
        f"{args.interval:g} s; kinds and shares: " + ", ".join(f"{k} {v:.0%}" for k, v in KINDS.items()),
        "- RSS, fds and threads: /proc of the server pid after each interval's load, its connections closed and "
        "nothing in flight; queue depth and in flight: the largest of the interval (/metrics every second)",
        f"- server counters at the end: dropped requests by reason {counters['dropped_requests'] or 'none'}, "
        f"requests in flight {counters['requests_in_flight']:g}",
        "",
        f"![RSS, descriptors, threads and p99 over the soak]({image})",
        "",
        table(samples),
        "",
        "Requests by kind and status (`closed`: the client left before an answer, on purpose):",
        "",
        counts_table(samples),
        "",
        *[f"- {check}" for check in checks],
        *[f"- unexpected at {o.at_s:.0f} s: {o.kind} {o.status}: {o.problem}" for o in unexpected[:5]],
        "",
        verdict_line(checks),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = server_parser("bench.soak", __doc__)
    p.add_argument("--pid", type=int, help="pid of the --url server (its /proc is read)")
    p.add_argument("--duration", type=float, default=3600.0, help="seconds of load")
    p.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients")
    p.add_argument("--warmup-intervals", type=int, default=1, help="intervals before the growth baseline")
    p.add_argument("--max-growth", type=float, default=MAX_GROWTH, help="bound on RSS and descriptor growth")
    p.add_argument("--timeout", type=float, default=120.0, help="client timeout per request, seconds")
    p.add_argument("--source-file", type=Path, help="source sentences, one a line (default: toy German strings)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", type=Path, help="where soak.json, soak.md and soak.png go (default: a new temp dir)")
    args = p.parse_args(argv)
    if args.url and args.pid is None:
        p.error("--url needs --pid: the soak reads the server's /proc")
    if args.duration <= 0 or args.interval <= 0 or args.clients < 1 or args.warmup_intervals < 1:
        p.error("--duration, --interval, --clients and --warmup-intervals must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = {} if args.url else {"MT_MODELS": "de-en", **dict(item.split("=", 1) for item in args.env)}
    out = args.output_dir or Path(tempfile.mkdtemp(prefix="mt-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    repository = None if args.url else args.repository
    server = ServerProcess(repository, env, out / "service.log", url=args.url, pid=args.pid).start()
    try:
        samples, unexpected, counters = asyncio.run(soak(server, args))
    finally:
        server.stop()
    checks = verdict(samples, len(unexpected), args.warmup_intervals, args.max_growth)
    title = f"Soak: {server.served}, {args.clients} clients"
    plot(samples, out / "soak.png", title, args.warmup_intervals, args.max_growth)
    record = {
        "command": command_line("bench.soak"),
        "served": server.served,
        "settings": server.settings,
        "clients": args.clients,
        "duration_s": args.duration,
        "interval_s": args.interval,
        "samples": samples,
        "server_counters": counters,
        "unexpected": [dataclasses.asdict(o) for o in unexpected[:50]],
        "unexpected_total": len(unexpected),
        "checks": checks,
        "passed": passed(checks),
    }
    (out / "soak.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    text = report(args, server, samples, unexpected, counters, checks, "soak.png")
    (out / "soak.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    print(f"wrote {out}/soak.json, soak.md, soak.png")
    if not args.no_write:
        shutil.copyfile(out / "soak.png", IMAGE)
        shutil.copyfile(out / "soak.json", RECORD)
        text = report(args, server, samples, unexpected, counters, checks, "images/soak.png")
        write_section(DOC, "bench/soak.py", text)
        print(f"wrote {IMAGE.relative_to(ROOT)}, {RECORD.relative_to(ROOT)} and docs/reliability.md")
    return 0 if passed(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
