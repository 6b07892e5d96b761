"""The engine in the server process against the engine in a worker process (MT_ENGINE_PROCESS, issue 57), in one run
on one machine: the channel's own cost, lone-request latency, 64 closed-loop clients, server CPU per sentence.

1. channel: round trips of one call through the worker process's socket (service/execution/remote.py ``Channel``,
   ``ping``) carrying what a one-sentence batch carries (its options and source ids out, the same back), and of a
   one-sentence ``batch`` call, against the same batch run in this process (engine_runner).
2. for each mode (``in-process``: MT_ENGINE_PROCESS=false; ``worker-process``: true), a server of its own (the same
   settings otherwise; started one after the other, never both at once): ``--lone`` one-sentence requests one at a
   time (p50, p90 in ms), then ``--clients`` closed-loop clients on bench/raw_client.py connections sending
   ``--requests`` one-sentence requests in all (sentences/s, p50, p99), with the CPU seconds of the server and its
   worker processes over that load divided by the sentences (ms of CPU per sentence).

``--rounds`` servers of each mode run in turn (in, worker, in, worker ...); the ratio table divides the medians,
worker-process by in-process. Acceptance (issue 57): lone p50 within 5% (or 0.3 ms),
64-client throughput not lower.

    python -m bench.engine_process --clients 64 --requests 2000 --lone 300 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.engine_faults import engine_pids
from bench.harness import ROOT, ServerProcess, machine, now, percentile
from bench.raw_client import RawConnection

MODES = {"in-process": "false", "worker-process": "true"}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and of its engine worker processes alive now."""
    total = 0.0
    for p in [pid, *engine_pids(pid)]:
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def channel_cost(repository: Path, model: str, sentence: str, n: int) -> dict[str, float]:
    """Median microseconds: a ping through the socket with a one-sentence batch's payload, a one-sentence batch in
    the worker process, the same batch in this process."""
    from core.bundle import load_bundle, versions_of
    from engine.decoding import TranslateOptions
    from service.execution.channel import spawn
    from service.execution.engine_build import EngineSpec, build_engine
    from service.execution.work import Source, engine_runner

    bundle = load_bundle(repository / model / versions_of(repository, model)[-1])
    spec = EngineSpec(providers="cpu", fused_step="auto")
    channel, _ = spawn(model, bundle.path, (spec, 1, False, "warning"), lambda *_: None)
    local = build_engine(bundle, spec)
    options = local.resolved(TranslateOptions.request())
    sources = [Source(local.source_ids([sentence])[0])]
    runner = engine_runner(local)

    def timed(call) -> float:
        call()
        times = []
        for _ in range(n):
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1e6

    try:
        return {
            "ping (one sentence's payload)": timed(lambda: channel.call("ping", options, sources)),
            "batch in the worker process": timed(lambda: channel.call("batch", options, sources)),
            "batch in this process": timed(lambda: runner(options, sources)),
        }
    finally:
        channel.close()


async def _lone(url: str, sentences: list[str], n: int) -> list[float]:
    conn, times = RawConnection(url), []
    for i in range(n):
        started = time.perf_counter()
        status, body = await conn.post_json("/v1/translate", {"texts": [sentences[i % len(sentences)]]})
        times.append(time.perf_counter() - started)
        assert status == 200, body[:200]
    await conn.close()
    return times


async def _load(url: str, sentences: list[str], clients: int, requests: int) -> tuple[list[float], float]:
    left, times = iter(range(requests)), []

    async def client() -> None:
        conn = RawConnection(url)
        for i in left:
            started = time.perf_counter()
            status, body = await conn.post_json("/v1/translate", {"texts": [sentences[i % len(sentences)]]})
            times.append(time.perf_counter() - started)
            assert status == 200, body[:200]
        await conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return times, time.perf_counter() - started


def measure(server: ServerProcess, sentences: list[str], args: argparse.Namespace) -> dict[str, float]:
    asyncio.run(_lone(server.url, sentences, 20))  # warm: first sessions' allocations, connections
    lone = asyncio.run(_lone(server.url, sentences, args.lone))
    cpu = cpu_seconds(server.pid)
    times, wall = asyncio.run(_load(server.url, sentences, args.clients, args.requests))
    cpu = cpu_seconds(server.pid) - cpu
    return {
        "lone p50 ms": percentile(lone, 50) * 1e3,
        "lone p90 ms": percentile(lone, 90) * 1e3,
        f"{args.clients} clients sentences/s": args.requests / wall,
        f"{args.clients} clients p50 ms": percentile(times, 50) * 1e3,
        f"{args.clients} clients p99 ms": percentile(times, 99) * 1e3,
        "server CPU ms per sentence": cpu / args.requests * 1e3,
    }


def run_mode(flag: str, sentences: list[str], args: argparse.Namespace) -> dict[str, float]:
    """One server with MT_ENGINE_PROCESS=``flag``, measured, then stopped."""
    with tempfile.TemporaryDirectory(prefix="bench-engine-process-") as tmp:
        env = {"MT_ENGINE_PROCESS": flag, "MT_MODELS": args.model, "MT_DEFAULT_MODEL": args.model,
               "MT_SCHEDULER": args.scheduler, "MT_STATE_DIR": tmp,
               "MT_MAX_QUEUE_SENTENCES": str(max(1024, 4 * args.clients))}  # fmt: skip
        server = ServerProcess(args.repository, env, Path(tmp) / "service.log").start(300)
        try:
            return measure(server, sentences, args)
        finally:
            server.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.engine_process", description=__doc__.split("\n\n")[0])
    p.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    p.add_argument("--model", default="de-en")
    p.add_argument("--source-file", type=Path, default=ROOT.parent / "shared/data/multi30k/test_2016_flickr.de")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=2000, help="one-sentence requests of the clients, per mode")
    p.add_argument("--lone", type=int, default=300, help="one-at-a-time requests per mode")
    p.add_argument("--channel-calls", type=int, default=2000, help="round trips timed by the channel measurement")
    p.add_argument("--scheduler", default="dynamic", choices=("dynamic", "continuous"))
    p.add_argument("--rounds", type=int, default=3, help="servers of each mode, in turn; the table takes medians")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sentences = [s.strip() for s in args.source_file.read_text(encoding="utf-8").splitlines() if s.strip()]
    print(f"{machine()}\n{now()}; {len(sentences)} sentences, MT_SCHEDULER={args.scheduler}", flush=True)
    print(f"\n| channel (median of {args.channel_calls}) | us |\n| --- | --- |")
    for name, us in channel_cost(args.repository, args.model, sentences[0], args.channel_calls).items():
        print(f"| {name} | {us:.0f} |", flush=True)
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for round_ in range(1, args.rounds + 1):
        for mode, flag in MODES.items():  # in turn, so that a change in the machine's load falls on both
            runs[mode].append(run_mode(flag, sentences, args))
            print(f"round {round_} {mode}: " + ", ".join(f"{k} {v:.2f}" for k, v in runs[mode][-1].items()), flush=True)
    a, b = ({k: statistics.median(r[k] for r in runs[mode]) for k in runs[mode][0]} for mode in MODES)
    print(f"\n| measure (median of {args.rounds} rounds) | in-process | worker-process | worker / in |")
    print("| --- | --- | --- | --- |")
    for key in a:
        print(f"| {key} | {a[key]:.2f} | {b[key]:.2f} | {b[key] / a[key]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
