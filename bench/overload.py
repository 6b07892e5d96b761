"""Overload test: offer ~10x the service's capacity and check that it sheds load instead of falling over.

1. capacity: ``--clients`` closed-loop clients for ``--capacity-seconds`` measure the requests/s it sustains;
2. overload: requests arrive open-loop (at fixed times, whatever the answers) at ``--factor`` x capacity for
   ``--seconds``: once the bounded queue is full the service must refuse fast (429, or 503) with Retry-After,
   the requests it accepts must keep a bounded p99, its memory (VmRSS of the server pid) must stay bounded,
   and it must not crash;
3. recovery: right after, one client at a time: every request must succeed again at once.

Writes the results (command, date, machine) into docs/reliability.md.

    python -m bench.overload --repository model_repository --factor 10 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.harness import ServerProcess, percentile
from bench.reliability_harness import (
    RawHttpClient,
    passed,
    publish,
    report_header,
    sentences,
    server_parser,
    verdict_line,
)

REFUSED = (429, 503)
NOT_SENT = "not sent (client at its concurrency limit)"
DETAIL_CHARS = 300


@dataclass
class Outcome:
    sent_at: float
    status: int | str  # HTTP status, or the transport error's name
    latency_s: float
    retry_after: str | None = None
    detail: str = ""  # the start of the body of an answer other than 200 (what a refusal says)


@dataclass
class OverloadResult:
    capacity_rps: float = 0.0
    offered_rps: float = 0.0
    sent_rps: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    recovery: list[Outcome] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)  # samples during the overload phase
    rss_baseline_mb: float | None = None
    alive: bool = True

    def by_status(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for o in self.outcomes:
            counts[str(o.status)] = counts.get(str(o.status), 0) + 1
        return counts

    def latencies(self, statuses: tuple) -> list[float]:
        return [o.latency_s for o in self.outcomes if o.status in statuses]


def request_body(texts: list[str], n_texts: int, beam_size: int, max_length: int) -> dict:
    return {"texts": texts[:n_texts], "beam_size": beam_size, "max_length": max_length}


async def measure_capacity(url: str, body: dict, clients: int, seconds: float, timeout: float = 60.0) -> float:
    """Requests/s that ``clients`` closed-loop clients get answered (200) in ``seconds``."""
    client = RawHttpClient(url, clients)
    request = client.request_bytes("/v1/translate", json.dumps(body).encode())
    done = 0
    stop = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            status, _, _ = await client.send(request, timeout)
            done += status == 200

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    await client.close()
    return done / elapsed


async def open_loop(
    url: str,
    body: dict,
    rate: float,
    seconds: float,
    timeout: float = 60.0,
    max_in_flight: int = 512,
    headers: dict[str, str] | None = None,
) -> tuple[list[Outcome], float]:
    """Send at ``rate`` requests/s for ``seconds`` whatever the answers; returns outcomes and the rate really sent.

    At most ``max_in_flight`` requests are outstanding (one connection each): an arrival beyond that is recorded
    as 'not sent' rather than queued in the client, so latencies are the server's, not a client pool's.
    """
    client = RawHttpClient(url, max_in_flight)
    request = client.request_bytes("/v1/translate", json.dumps(body).encode(), headers)
    outcomes: list[Outcome] = []

    async def one(sent_at: float) -> None:
        started = time.perf_counter()
        try:
            status, headers, answer = await client.send(request, timeout)
            retry = headers.get("retry-after")
            detail = "" if status == 200 else answer[:DETAIL_CHARS].decode("utf-8", "replace")
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            status, retry, detail = type(exc).__name__, None, ""
        outcomes.append(Outcome(sent_at, status, time.perf_counter() - started, retry, detail))

    tasks = []
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        if not client.idle and client.open >= max_in_flight:
            outcomes.append(Outcome(time.perf_counter() - start, NOT_SENT, 0.0))
            continue
        tasks.append(asyncio.ensure_future(one(time.perf_counter() - start)))
    sent_for = time.perf_counter() - start
    await asyncio.gather(*tasks)
    await client.close()
    return outcomes, len(tasks) / sent_for if sent_for else 0.0


async def sequential(
    url: str,
    body: dict,
    seconds: float,
    timeout: float = 60.0,
    min_requests: int = 1,
    headers: dict[str, str] | None = None,
) -> list[Outcome]:
    """One client, one request at a time, for ``seconds`` (and at least ``min_requests`` requests)."""
    outcomes: list[Outcome] = []
    async with httpx.AsyncClient(base_url=url, timeout=timeout, headers=headers) as client:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds or len(outcomes) < min_requests:
            t = time.perf_counter()
            try:
                response = await client.post("/v1/translate", json=body)
                status, retry = response.status_code, response.headers.get("retry-after")
                detail = "" if status == 200 else response.text[:DETAIL_CHARS]
            except httpx.HTTPError as exc:
                status, retry, detail = type(exc).__name__, None, ""
            outcomes.append(Outcome(t - start, status, time.perf_counter() - t, retry, detail))
    return outcomes


class RssSampler(threading.Thread):
    def __init__(self, server: ServerProcess, every_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.server, self.every_s, self.samples = server, every_s, []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            rss = self.server.rss_mb()
            if rss is not None:
                self.samples.append(rss)
            self._stop_event.wait(self.every_s)

    def stop(self) -> list[float]:
        self._stop_event.set()
        self.join()
        return self.samples


def verdict(result: OverloadResult, args: argparse.Namespace) -> list[str]:
    """The promises, each as 'ok: ...' or 'FAIL: ...'."""
    checks = []
    refused = [o for o in result.outcomes if o.status in REFUSED]
    accepted = result.latencies((200,))
    other = {k: v for k, v in result.by_status().items() if k not in ("200", "429", "503", NOT_SENT)}
    sent_share = result.sent_rps / result.offered_rps if result.offered_rps else 0.0
    checks.append(
        ("ok" if sent_share >= 0.8 else "FAIL")
        + f": the client offered the load: sent {result.sent_rps:.0f}/s of {result.offered_rps:.0f}/s planned "
        f"({result.by_status().get(NOT_SENT, 0)} arrivals not sent: {NOT_SENT})"
    )
    checks.append(("ok" if refused else "FAIL") + f": {len(refused)} requests refused (429/503) once the queue filled")
    missing = [o for o in refused if not (o.retry_after or "").isdigit()]
    checks.append(("FAIL" if missing else "ok") + f": Retry-After on every refusal ({len(missing)} without)")
    p99_refused = percentile([o.latency_s for o in refused], 99) * 1000
    checks.append(
        ("ok" if p99_refused <= args.max_refusal_ms else "FAIL")
        + f": refusals are fast: p99 {p99_refused:.0f} ms (bound {args.max_refusal_ms:.0f} ms)"
    )
    p99_accepted = percentile(accepted, 99) * 1000
    checks.append(
        ("ok" if accepted and p99_accepted <= args.max_accepted_p99_ms else "FAIL")
        + f": accepted requests p99 {p99_accepted:.0f} ms (bound {args.max_accepted_p99_ms:.0f} ms)"
    )
    checks.append(("FAIL" if other else "ok") + f": no other outcome (5xx, transport errors): {other or 'none'}")
    growth = (max(result.rss_mb) - result.rss_baseline_mb) if result.rss_mb and result.rss_baseline_mb else None
    if growth is not None:
        checks.append(
            ("ok" if growth <= args.max_rss_growth_mb else "FAIL")
            + f": server RSS grew {growth:.0f} MiB at most (bound {args.max_rss_growth_mb:.0f} MiB)"
        )
    checks.append(("ok" if result.alive else "FAIL") + ": the server process is alive")
    bad = [o for o in result.recovery if o.status != 200]
    checks.append(
        ("ok" if result.recovery and not bad else "FAIL")
        + f": recovery: {len(result.recovery) - len(bad)} of {len(result.recovery)} requests answered 200 right after"
    )
    return checks


def report(args: argparse.Namespace, server: ServerProcess, result: OverloadResult, checks: list[str]) -> str:
    refused = [o.latency_s * 1000 for o in result.outcomes if o.status in REFUSED]
    accepted = [v * 1000 for v in result.latencies((200,))]
    recovery = [o.latency_s * 1000 for o in result.recovery if o.status == 200]
    rss = result.rss_mb
    lines = [
        *report_header("Overload (bench/overload.py)", "bench.overload", args, server),
        f"- request: translate {args.texts} texts, beam {args.beam_size}, max_length {args.max_length}",
        f"- capacity (closed loop, {args.clients} clients, {args.capacity_seconds:.0f} s): "
        f"{result.capacity_rps:.1f} requests/s; offered {result.offered_rps:.1f} requests/s "
        f"({args.factor:g}x) for {args.seconds:.0f} s, sent {result.sent_rps:.1f}/s",
        "",
        "| outcome | count | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        f"| accepted (200) | {len(accepted)} | {percentile(accepted, 50):.0f} | {percentile(accepted, 99):.0f} "
        f"| {max(accepted, default=float('nan')):.0f} |",
        f"| refused (429/503) | {len(refused)} | {percentile(refused, 50):.0f} | {percentile(refused, 99):.0f} "
        f"| {max(refused, default=float('nan')):.0f} |",
        f"| recovery, 1 client (200) | {len(recovery)} | {percentile(recovery, 50):.0f} "
        f"| {percentile(recovery, 99):.0f} | {max(recovery, default=float('nan')):.0f} |",
        "",
        f"Statuses under overload: {result.by_status()}. Server RSS: baseline "
        f"{result.rss_baseline_mb or float('nan'):.0f} MiB, max {max(rss, default=float('nan')):.0f} MiB, "
        f"end {rss[-1] if rss else float('nan'):.0f} MiB.",
        "",
        *[f"- {c}" for c in checks],
        "",
        verdict_line(checks),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = server_parser("bench.overload", __doc__)
    p.add_argument("--factor", type=float, default=10.0, help="offered load as a multiple of the capacity")
    p.add_argument("--seconds", type=float, default=20.0, help="duration of the overload phase")
    p.add_argument("--capacity-seconds", type=float, default=10.0)
    p.add_argument("--recovery-seconds", type=float, default=5.0)
    p.add_argument("--clients", type=int, default=16, help="closed-loop clients for the capacity phase")
    p.add_argument("--texts", type=int, default=4, help="texts per request")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=40)
    p.add_argument("--queue", type=int, default=64, help="MT_MAX_QUEUE_SENTENCES of the started server")
    p.add_argument("--max-refusal-ms", type=float, default=500.0, help="bound on the p99 of refusals")
    p.add_argument("--max-accepted-p99-ms", type=float, default=15_000.0, help="bound on the p99 of accepted")
    p.add_argument("--max-rss-growth-mb", type=float, default=256.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = {"MT_MAX_QUEUE_SENTENCES": str(args.queue), **dict(item.split("=", 1) for item in args.env)}
    if args.url:
        env = {}
    log_dir = Path(tempfile.mkdtemp(prefix="mt-overload-"))
    server = ServerProcess(None if args.url else args.repository, env, log_dir / "service.log", url=args.url).start()
    body = request_body(sentences(None, 16, seed=3), args.texts, args.beam_size, args.max_length)
    result = OverloadResult()
    try:
        asyncio.run(sequential(server.url, body, 1.0))  # warm-up
        result.rss_baseline_mb = server.rss_mb()
        print("measuring capacity ...", flush=True)
        result.capacity_rps = asyncio.run(measure_capacity(server.url, body, args.clients, args.capacity_seconds))
        result.offered_rps = args.factor * result.capacity_rps
        print(f"capacity {result.capacity_rps:.1f}/s; offering {result.offered_rps:.1f}/s ...", flush=True)
        sampler = RssSampler(server)
        sampler.start()
        try:
            phase = open_loop(server.url, body, result.offered_rps, args.seconds)
            result.outcomes, result.sent_rps = asyncio.run(phase)
        finally:
            result.rss_mb = sampler.stop()
        result.recovery = asyncio.run(sequential(server.url, body, args.recovery_seconds))
        result.alive = server.alive()
    finally:
        server.stop()
    checks = verdict(result, args)
    publish(args, "bench/overload.py", report(args, server, result, checks))
    return 0 if passed(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
