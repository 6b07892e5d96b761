"""Per-key fairness: how much does one API key flooding at ``--factor`` x capacity slow down another key?

For each scheduler in ``--schedulers``:

1. the service without API keys (one queue, oldest first: the behaviour before per-key limits): its capacity
   (``--clients`` closed-loop clients sending the flood request), the quiet client alone, then the quiet client
   while another client floods open-loop at ``--factor`` x capacity;
2. for each share s in ``--rate-shares``, the service with two API keys and ``MT_KEY_RATE_PER_S`` = s x capacity
   (``MT_KEY_QUEUE_SHARE`` and ``MT_KEY_BURST`` at their defaults unless given with ``--env``): the quiet key alone,
   then the quiet key while the flood key floods at ``--factor`` x capacity.

The quiet client sends one request at a time, one every ``--quiet-interval-s`` (and never faster than 80% of its
key's rate limit, so it is never refused by its own limit; a p99 wants ~100 requests a phase: size ``--seconds``).
The flood runs in a process of its own (``flood_in_process``), so the quiet client's latencies are not those of an
event loop busy sending the flood. The goal (issue 19): under the flood the quiet key's p99 stays within 2x its p99
alone on the same server, and the quiet key is never refused.

Two controls (``--controls``, on by default) split what the flood costs the quiet key, each on the same server as
the run it explains: *admitted only*, the flood key sending just its rate limit (nothing refused: the cost of the
work one key may bring), and *refused only*, the flood's request rate sent with a key the server does not know
(every request 401 before its body is read: the cost of receiving and refusing the flood, no engine work at all).

    python -m bench.fairness --repository model_repository --factor 10 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import ServerProcess, percentile
from bench.overload import Outcome, measure_capacity, open_loop, request_body, sequential
from bench.reliability_harness import passed, publish, report_header, sentences, server_parser, verdict_line

FLOOD_KEY, QUIET_KEY, UNKNOWN_KEY = "bench-flood-key", "bench-quiet-key", "bench-unknown-key"
ADMITTED_PACE = 0.95  # the admitted-only control sends at 95% of the key's rate limit: nothing is refused
GOAL_RATIO = 2.0
QUIET_PACE_FACTOR = 1.25  # the quiet client paces itself at 1 / 1.25 = 80% of its key's rate limit


@dataclass
class Run:
    """One server: its settings, the quiet client alone and under the flood, the flood's outcomes."""

    scheduler: str
    label: str  # "no keys" or "keys, rate s x capacity"
    key_rate: float = 0.0
    control: str = ""  # "" (the run the goal is about), "admitted only" or "refused only"
    alone: list[Outcome] = field(default_factory=list)
    flooded: list[Outcome] = field(default_factory=list)
    flood: list[Outcome] = field(default_factory=list)
    flood_sent_rps: float = 0.0
    seconds: float = 0.0

    def p(self, outcomes: list[Outcome], q: float) -> float:
        return percentile([o.latency_s * 1000 for o in outcomes if o.status == 200], q)

    @property
    def ratio(self) -> float:
        return self.p(self.flooded, 99) / self.p(self.alone, 99)

    def refused(self, outcomes: list[Outcome]) -> int:
        return sum(o.status != 200 for o in outcomes)

    def flood_refusals(self) -> str:
        refused = [o for o in self.flood if o.status == 429]
        rate = sum("rate limit" in o.detail for o in refused)
        share = sum("queued sentences waiting" in o.detail for o in refused)
        unknown = sum(o.status == 401 for o in self.flood)
        return f"{rate} / {share} / {len(refused) - rate - share}" + (f" (401: {unknown})" if unknown else "")


def flood_in_process(
    url: str, body: dict, rate: float, seconds: float, headers: dict[str, str]
) -> tuple[list[Outcome], float]:
    """``open_loop`` in a process of its own (run through a ProcessPoolExecutor)."""
    return asyncio.run(open_loop(url, body, rate, seconds, headers=headers))


def _ready() -> bool:
    return True


async def paced(url: str, body: dict, seconds: float, interval: float, headers: dict[str, str]) -> list[Outcome]:
    """One request at a time for ``seconds``, each started at least ``interval`` after the one before."""
    outcomes: list[Outcome] = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        started = time.perf_counter()
        outcomes += await sequential(url, body, 0.0, headers=headers)
        await asyncio.sleep(max(0.0, interval - (time.perf_counter() - started)))
    return outcomes


async def measure(
    url: str, run: Run, flood_body: dict, quiet_body: dict, rate: float, args, flood_key: str = FLOOD_KEY
) -> None:
    """The quiet client alone, then under the flood (both for ``args.seconds``; the flood from its own process)."""
    flood_headers = {"X-API-Key": flood_key} if run.key_rate else {}
    quiet_headers = {"X-API-Key": QUIET_KEY} if run.key_rate else {}
    interval = args.quiet_interval_s
    if run.key_rate:
        interval = max(interval, QUIET_PACE_FACTOR / run.key_rate)
    run.alone = await paced(url, quiet_body, args.seconds, interval, quiet_headers)
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        await loop.run_in_executor(pool, _ready)  # the process is up and has imported this module
        flood = loop.run_in_executor(pool, flood_in_process, url, flood_body, rate, args.seconds, flood_headers)
        quiet = paced(url, quiet_body, args.seconds, interval, quiet_headers)
        (run.flood, run.flood_sent_rps), run.flooded = await asyncio.gather(flood, quiet)
    run.seconds = args.seconds


def start(args, env: dict[str, str], log_dir: Path, name: str) -> ServerProcess:
    settings = {**dict(item.split("=", 1) for item in args.env), **env}
    return ServerProcess(args.repository, settings, log_dir / f"{name}.log").start()


def run_scheduler(
    args, scheduler: str, flood_body: dict, quiet_body: dict, log_dir: Path
) -> tuple[float, list[Run], ServerProcess]:
    """Capacity, the runs without and with API keys, and the first server (for the report's header)."""
    runs = []
    first = server = start(args, {"MT_SCHEDULER": scheduler}, log_dir, f"{scheduler}-open")
    try:
        asyncio.run(sequential(server.url, flood_body, 1.0))  # warm-up
        capacity = asyncio.run(measure_capacity(server.url, flood_body, args.clients, args.capacity_seconds))
        print(f"{scheduler}: capacity {capacity:.1f} requests/s; flooding at {args.factor:g}x", flush=True)
        run = Run(scheduler, "no keys (one queue, oldest first)")
        asyncio.run(measure(server.url, run, flood_body, quiet_body, args.factor * capacity, args))
        runs.append(run)
    finally:
        server.stop()
    for share in args.rate_shares:
        key_rate = share * capacity
        keys = f"{FLOOD_KEY},{QUIET_KEY}"
        env = {"MT_SCHEDULER": scheduler, "MT_API_KEYS": keys, "MT_KEY_RATE_PER_S": f"{key_rate:.3f}"}
        server = start(args, env, log_dir, f"{scheduler}-keys-{share:g}")
        try:
            asyncio.run(sequential(server.url, flood_body, 1.0, headers={"X-API-Key": QUIET_KEY}))  # warm-up
            label = f"2 keys, rate {share:g} x capacity = {key_rate:.1f}/s per key"
            run = Run(scheduler, label, key_rate)
            asyncio.run(measure(server.url, run, flood_body, quiet_body, args.factor * capacity, args))
            runs.append(run)
            if args.controls:
                control = Run(scheduler, f"{label}; control: admitted only", key_rate, "admitted only")
                asyncio.run(measure(server.url, control, flood_body, quiet_body, ADMITTED_PACE * key_rate, args))
                runs.append(control)
            if args.controls and share == args.rate_shares[0]:
                control = Run(scheduler, f"{label}; control: refused only (unknown key, 401)", key_rate, "refused only")
                asyncio.run(
                    measure(server.url, control, flood_body, quiet_body, args.factor * capacity, args, UNKNOWN_KEY)
                )
                runs.append(control)
        finally:
            server.stop()
    return capacity, runs, first


def verdict(runs: list[Run]) -> list[str]:
    checks = []
    for run in runs:
        if not run.key_rate or run.control:
            continue
        what = f"{run.scheduler}, {run.label}"
        ratio = run.ratio
        checks.append(
            ("ok" if ratio <= GOAL_RATIO else "FAIL")
            + f": {what}: quiet p99 under the flood {run.p(run.flooded, 99):.0f} ms = {ratio:.2f}x alone "
            f"({run.p(run.alone, 99):.0f} ms; goal <= {GOAL_RATIO:g}x)"
        )
        refused = run.refused(run.flooded)
        checks.append(("ok" if refused == 0 else "FAIL") + f": {what}: quiet key refused {refused} times")
        flood_429 = sum(o.status == 429 for o in run.flood)
        checks.append(("ok" if flood_429 else "FAIL") + f": {what}: the flood key got {flood_429} 429s")
    return checks


def report(args, capacities: dict[str, float], runs: list[Run], checks: list[str], server: ServerProcess) -> str:
    rows = []
    for run in runs:
        ok = sum(o.status == 200 for o in run.flood)
        rows.append(
            f"| {run.scheduler} | {run.label} | {len(run.alone)} | {run.p(run.alone, 50):.0f} "
            f"| {run.p(run.alone, 99):.0f} | {len(run.flooded)} | {run.p(run.flooded, 50):.0f} "
            f"| {run.p(run.flooded, 99):.0f} | {run.ratio:.2f} | {run.refused(run.flooded)} "
            f"| {run.flood_sent_rps:.0f} | {ok / run.seconds:.1f} | {run.flood_refusals()} |"
        )
    capacity = ", ".join(f"{s} {c:.1f}" for s, c in capacities.items())
    lines = [
        *report_header("Per-key fairness (bench/fairness.py)", "bench.fairness", args, server),
        f"- flood request: translate {args.texts} texts, beam {args.beam_size}, max_length {args.max_length}, "
        f"open loop at {args.factor:g}x capacity for {args.seconds:g} s; quiet request: 1 text, same options, one "
        f"at a time every {args.quiet_interval_s:g} s (or at 80% of its key's rate, whichever is slower)",
        f"- capacity (closed loop, {args.clients} clients, requests/s): {capacity}",
        "",
        "| scheduler | server | alone n | alone p50 ms | alone p99 ms | flooded n | flooded p50 ms | flooded p99 ms "
        "| p99 ratio | quiet refused | flood sent/s | flood 200/s | flood 429: rate / key share / queue |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows,
        "",
        *[f"- {c}" for c in checks],
        *(
            [
                "- controls (not part of the verdict): *admitted only* = the flood key sends "
                f"{ADMITTED_PACE:.0%} of its rate limit, nothing refused; *refused only* = the flood's request rate "
                "with a key the server does not know, every request 401 before its body is read"
            ]
            if args.controls
            else []
        ),
        "",
        verdict_line(checks),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = server_parser("bench.fairness", __doc__)
    p.add_argument("--schedulers", default="dynamic,continuous", help="MT_SCHEDULER values, comma-separated")
    p.add_argument("--rate-shares", default="0.5", help="per-key rate limits as shares of the capacity")
    p.add_argument("--factor", type=float, default=10.0, help="the flood as a multiple of the capacity")
    p.add_argument("--seconds", type=float, default=30.0, help="each phase: quiet alone, quiet under the flood")
    p.add_argument("--capacity-seconds", type=float, default=10.0)
    p.add_argument("--clients", type=int, default=16, help="closed-loop clients for the capacity phase")
    p.add_argument("--quiet-interval-s", type=float, default=0.25, help="the quiet client's pace (start to start)")
    p.add_argument("--texts", type=int, default=4, help="texts per flood request")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=40)
    p.add_argument(
        "--controls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the admitted-only and refused-only controls (see the module's text)",
    )
    args = p.parse_args(argv)
    args.schedulers = [s.strip() for s in args.schedulers.split(",") if s.strip()]
    args.rate_shares = [float(s) for s in args.rate_shares.split(",") if s.strip()]
    if args.url:
        p.error("bench.fairness starts its own servers (with and without API keys); --url is not supported")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    texts = sentences(None, 16, seed=5)
    flood_body = request_body(texts, args.texts, args.beam_size, args.max_length)
    quiet_body = request_body(texts[args.texts :], 1, args.beam_size, args.max_length)
    log_dir = Path(tempfile.mkdtemp(prefix="mt-fairness-"))
    capacities, runs, first = {}, [], None
    for scheduler in args.schedulers:
        capacities[scheduler], scheduler_runs, server = run_scheduler(args, scheduler, flood_body, quiet_body, log_dir)
        runs += scheduler_runs
        first = first or server
    checks = verdict(runs)
    publish(args, "bench/fairness.py", report(args, capacities, runs, checks, first))
    return 0 if passed(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
