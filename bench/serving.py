"""HTTP service benchmark: continuous vs dynamic batching vs off, side by side, at several client concurrencies.

Starts the real service (``python -m service``) once per mode on the same bundle repository with the same thread
settings: MT_SCHEDULER=continuous (sentences join the running decode at every step), dynamic (whole batches within
MT_MAX_WAIT_MS) and off (one sentence per batch). For each client count, every server gets the same requests (one
German sentence each, from test_2016_flickr) in turn, so background load hits them alike. The clients run in
this process, the servers in their own: the server's CPU seconds per sentence (utime + stime from /proc) are
reported beside the client-side throughput and p50/p95/p99 latency, so the clients' share of the cores stays out
of that ratio. With --stream-clients, streaming requests measure the time to the first delta event. The table,
with the command, date and machine, goes into a marked section of docs/benchmarks.md.

    python -m bench.serving --data ../shared/data/multi30k --requests 400 --clients 1 8 64 --beam-size 4

Continuous batching needs a bundle whose decoder_step graph has interface 3 (a server given an older bundle
falls back to dynamic; the table says which scheduler each server ran).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import ROOT, ServerProcess, machine, now, percentile, write_section
from bench.raw_client import RawConnection

MODES = ("continuous", "dynamic", "off")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.serving", description=__doc__.split("\n\n")[0])
    p.add_argument("--repository", type=Path, default=ROOT / "model_repository", help="model repository folder")
    p.add_argument("--model", default="de-en", help="model name in the repository")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k", help="Multi30k folder")
    p.add_argument("--source-file", type=Path, help="sentences, one a line (default: <data>/test_2016_flickr.de)")
    p.add_argument("--requests", type=int, default=400, help="requests (one sentence each) per client count and mode")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64], help="concurrent clients")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="MT_INTRA_OP_THREADS of both servers")
    p.add_argument("--workers", type=int, default=1, help="MT_ENGINE_WORKERS of both servers")
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="MT_MAX_WAIT_MS of the dynamic server")
    p.add_argument("--max-batch", type=int, default=32, help="MT_MAX_BATCH_SENTENCES of the dynamic server")
    p.add_argument("--max-live-rows", type=int, default=128, help="MT_MAX_LIVE_ROWS of the continuous server")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="schedulers to compare")
    p.add_argument("--stream-clients", type=int, default=0, help="also stream with this many clients (TTFT)")
    p.add_argument("--variant", default="auto", help="MT_VARIANT (auto, fp32, int8, fp16)")
    p.add_argument("--warmup", type=int, default=8, help="requests sent to each server before measuring")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds per client count, the modes interleaved (their order rotated each round); rows pool the rounds",
    )
    p.add_argument(
        "--client",
        choices=("httpx", "raw"),
        default="httpx",
        help="the load generator's HTTP client: httpx, or bench/raw_client.py's (a fraction of the CPU; not for "
        "--stream-clients, which keep httpx)",
    )
    p.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md", help="results file to update")
    p.add_argument("--no-write", action="store_true", help="print only; leave the results file alone")
    args = p.parse_args(argv)
    if args.requests < 1 or any(c < 1 for c in args.clients):
        p.error("--requests and --clients must be positive")
    return args


def service(mode: str, args: argparse.Namespace, log_dir: Path) -> ServerProcess:
    """``python -m service`` with this benchmark's settings, ``mode`` as MT_SCHEDULER; not started yet."""
    env = {
        "MT_MODELS": args.model,
        "MT_DEFAULT_MODEL": args.model,
        "MT_PROVIDERS": "cpu",
        "MT_VARIANT": args.variant,
        "MT_INTRA_OP_THREADS": str(args.threads),
        "MT_INTER_OP_THREADS": "1",
        "MT_ENGINE_WORKERS": str(args.workers),
        "MT_SCHEDULER": mode,
        "MT_MAX_LIVE_ROWS": str(args.max_live_rows),
        "MT_MAX_WAIT_MS": str(args.max_wait_ms),
        "MT_MAX_BATCH_SENTENCES": str(args.max_batch),
        "MT_MAX_QUEUE_SENTENCES": str(max(1024, 4 * max(args.clients))),
        "MT_REQUEST_TIMEOUT_S": "600",
        "MT_MAX_REQUEST_TIMEOUT_S": "600",
        "MT_LOG_LEVEL": "warning",
        "OMP_NUM_THREADS": str(args.threads),
    }
    return ServerProcess(args.repository, env, log_dir / f"service-{mode}.log")


BATCH_HISTOGRAMS = ("mt_batch_size", "mt_decoder_step_rows")  # whole batches; the continuous scheduler's live steps


def batch_totals(server: ServerProcess) -> dict[str, tuple[float, float]]:
    """Per histogram of BATCH_HISTOGRAMS, (observations, their sum) so far: (whole engine batches, sentences in
    them) and (live decoder steps, rows in them). The continuous scheduler runs both: plain requests with an
    n-gram block, embeddings and attention in whole batches, the rest live."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    totals = dict.fromkeys(BATCH_HISTOGRAMS, (0.0, 0.0))
    for family in text_string_to_metric_families(text):
        if family.name in totals:
            count, total = totals[family.name]
            for s in family.samples:
                if s.name == f"{family.name}_count":
                    count += s.value
                elif s.name == f"{family.name}_sum":
                    total += s.value
            totals[family.name] = (count, total)
    return totals


def mean_between(before: tuple[float, float], after: tuple[float, float]) -> float:
    """Mean size of what a histogram observed between two readings of ``batch_totals``; nan when nothing."""
    count, total = after[0] - before[0], after[1] - before[1]
    return total / count if count else float("nan")


@dataclass
class Result:
    sentences: int
    errors: int
    seconds: float
    latencies: np.ndarray  # seconds, successful requests
    mean_batch: float  # sentences per whole batch (dynamic, off) or rows per live decoder step (continuous)
    cpu_per_sentence: float = float("nan")  # server CPU seconds per sentence
    # sentences per whole engine batch, every mode (continuous: the requests that did not decode live)
    whole_batch: float = float("nan")
    first_token: np.ndarray | None = None  # streaming: seconds to the first delta event

    @property
    def throughput(self) -> float:
        return (self.sentences - self.errors) / self.seconds

    def latency_ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000


async def closed_loop(
    url: str,
    sentences: list[str],
    clients: int,
    beam: int,
    model: str,
    label: str = "",
    stream: bool = False,
    client_kind: str = "httpx",
    texts: int = 1,
) -> Result:
    """``clients`` closed-loop clients sending each sentence once, ``texts`` sentences per request (the last request
    may hold fewer). ``stream``: requests with ``"stream": true``, read as Server-Sent Events to the end, the time to
    the first delta event kept. ``client_kind`` "raw": each client one bench/raw_client.py connection instead of
    httpx (not for streaming). Errors count the sentences of the requests that failed; latencies are per request.
    With a ``label``, progress and the first errors go to stderr under it. The one load driver of bench/serving.py,
    bench/profile_server.py and bench/asgi_servers.py."""
    if client_kind == "raw" and stream:
        raise ValueError("the raw client does not read streamed answers")
    if texts < 1:
        raise ValueError("texts: at least one sentence per request")
    latencies: list[float] = []
    first: list[float] = []
    errors = 0
    next_index = 0
    step = max(1, len(sentences) // 4)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    def report_error(status: int, detail: str) -> None:
        if label and errors < 3:
            print(f"  {label}: HTTP {status}: {detail[:200]}", file=sys.stderr)

    async def one(http: httpx.AsyncClient, chunk: list[str]) -> bool:
        body = {"texts": chunk, "beam_size": beam, "model": model, "timeout_s": 600}
        started = time.perf_counter()
        if not stream:
            response = await http.post("/v1/translate", json=body)
            ok = response.status_code == 200
            if not ok:
                report_error(response.status_code, response.text)
            if ok:
                latencies.append(time.perf_counter() - started)
            return ok
        seen_first, done = False, False
        async with http.stream("POST", "/v1/translate", json={**body, "stream": True}) as response:
            async for line in response.aiter_lines():
                if line.startswith("event: delta") and not seen_first:
                    first.append(time.perf_counter() - started)
                    seen_first = True
                elif line.startswith("event: done"):
                    done = True
                elif line.startswith("event: error"):
                    break
        if done:
            latencies.append(time.perf_counter() - started)
        return done

    async def raw_one(connection: RawConnection, chunk: list[str]) -> bool:
        body = {"texts": chunk, "beam_size": beam, "model": model, "timeout_s": 600}
        started = time.perf_counter()
        status, answer = await connection.post_json("/v1/translate", body)
        if status != 200:
            report_error(status, repr(answer))
        if status == 200:
            latencies.append(time.perf_counter() - started)
        return status == 200

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal next_index, errors
        connection = RawConnection(url) if client_kind == "raw" else None
        try:
            while next_index < len(sentences):
                chunk = sentences[next_index : next_index + texts]
                before, next_index = next_index, next_index + len(chunk)
                if label and next_index // step > before // step:
                    print(f"  {label}: {next_index}/{len(sentences)} sentences sent", file=sys.stderr, flush=True)
                ok = await (raw_one(connection, chunk) if connection is not None else one(http, chunk))
                if not ok:
                    errors += len(chunk)
        finally:
            if connection is not None:
                await connection.close()

    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        seconds = time.perf_counter() - started
    result = Result(len(sentences), errors, seconds, np.asarray(latencies), float("nan"))
    result.first_token = np.asarray(first) if stream else None
    return result


def measure(
    server: ServerProcess, mode: str, sentences: list[str], clients: int, args: argparse.Namespace, stream: bool = False
) -> Result:
    label = f"{mode:>10}, {clients:>3} clients{' streaming' if stream else ''}"
    before, cpu_before = batch_totals(server), server.cpu_seconds()
    result = asyncio.run(
        closed_loop(
            server.url,
            sentences,
            clients,
            args.beam_size,
            args.model,
            label,
            stream,
            "httpx" if stream else args.client,
        )
    )
    after, cpu_after = batch_totals(server), server.cpu_seconds()
    means = {name: mean_between(before[name], after[name]) for name in BATCH_HISTOGRAMS}
    result.mean_batch = means["mt_decoder_step_rows" if mode == "continuous" else "mt_batch_size"]
    result.whole_batch = means["mt_batch_size"]
    result.cpu_per_sentence = (cpu_after - cpu_before) / max(1, result.sentences - result.errors)
    ttft = ""
    if result.first_token is not None and len(result.first_token):
        ttft = (
            f"  first token p50 {percentile(result.first_token, 50) * 1000:7.1f} ms"
            f" p99 {percentile(result.first_token, 99) * 1000:7.1f} ms"
        )
    print(
        f"{label}: {result.throughput:7.1f} sent/s  p50 {result.latency_ms(50):7.1f} ms  "
        f"p95 {result.latency_ms(95):7.1f} ms  p99 {result.latency_ms(99):7.1f} ms  "
        f"server CPU {result.cpu_per_sentence * 1000:6.2f} ms/sent  "
        f"mean batch/rows {result.mean_batch:5.2f}  whole batch {result.whole_batch:5.2f}  "
        f"errors {result.errors}{ttft}",
        flush=True,
    )
    return result


def pooled(results: list[Result]) -> Result:
    """One row of several rounds: sentences and seconds summed, latencies together, the median round's CPU."""
    if len(results) == 1:
        return results[0]
    return Result(
        sum(r.sentences for r in results),
        sum(r.errors for r in results),
        sum(r.seconds for r in results),
        np.concatenate([r.latencies for r in results]),
        _mean_of_known([r.mean_batch for r in results]),
        float(np.median([r.cpu_per_sentence for r in results])),
        _mean_of_known([r.whole_batch for r in results]),
    )


def _mean_of_known(values: list[float]) -> float:
    """The mean of the rounds that measured something (a round with no batch of a kind has nan)."""
    known = [v for v in values if not np.isnan(v)]
    return float(np.mean(known)) if known else float("nan")


def round_lines(rounds: list[tuple[int, dict[str, list[Result]]]]) -> str:
    """Each round's ratios, so the spread between rounds is visible beside the pooled rows."""
    lines = ["Each round (in run order), continuous against the other modes of the same round:", ""]
    for clients, runs in rounds:
        if "continuous" not in runs:
            continue
        for other in (m for m in runs if m != "continuous"):
            pairs = list(zip(runs["continuous"], runs[other], strict=True))
            speed = " / ".join(f"{a.throughput / b.throughput:.2f}" for a, b in pairs)
            cpu = " / ".join(f"{a.cpu_per_sentence / b.cpu_per_sentence:.2f}" for a, b in pairs)
            p50 = " / ".join(f"{a.latency_ms(50) / b.latency_ms(50):.2f}" for a, b in pairs)
            whole = " / ".join(f"{a.whole_batch:.1f}:{b.whole_batch:.1f}" for a, b in pairs)
            lines.append(
                f"- {clients} client(s), continuous vs {other}: sent/s {speed}; server CPU ms/sent {cpu}; p50 {p50}; "
                f"mean whole batch {whole}"
            )
    return "\n".join(lines)


def table(rows: list[tuple[int, dict[str, Result]]], schedulers: dict[str, str]) -> str:
    header = ["clients", "mode", "sent/s", "p50 ms", "p95 ms", "p99 ms", "p99/p50", "server CPU ms/sent"]
    header += ["mean batch (rows/step)", "mean whole batch", "errors", "sent/s vs dynamic", "sent/s vs off"]
    header += ["p50 vs off"]
    lines = ["| " + " | ".join(header) + " |", "|---:|---|" + "---:|" * (len(header) - 2)]
    for clients, results in rows:
        for mode, r in results.items():
            dynamic, off = results.get("dynamic"), results.get("off")
            cells = [str(clients), mode if schedulers.get(mode, mode) == mode else f"{mode} (ran {schedulers[mode]})"]
            cells += [f"{r.throughput:.1f}"] + [f"{r.latency_ms(q):.1f}" for q in (50, 95, 99)]
            cells += [f"{r.latency_ms(99) / r.latency_ms(50):.2f}", f"{r.cpu_per_sentence * 1000:.2f}"]
            cells += [f"{r.mean_batch:.2f}", f"{r.whole_batch:.2f}", str(r.errors)]
            cells.append(f"{r.throughput / dynamic.throughput:.2f}x" if dynamic else "")
            cells.append(f"{r.throughput / off.throughput:.2f}x" if off else "")
            cells.append(f"{r.latency_ms(50) / off.latency_ms(50):.2f}x" if off else "")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def stream_table(rows: list[tuple[str, int, Result]]) -> str:
    lines = [
        "| mode | streaming clients | sent/s | time to first token p50 ms | p99 ms | whole answer p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, clients, r in rows:
        ft = r.first_token if r.first_token is not None else []
        lines.append(
            f"| {mode} | {clients} | {r.throughput:.1f} | {percentile(ft, 50) * 1000:.1f} | "
            f"{percentile(ft, 99) * 1000:.1f} | {r.latency_ms(50):.1f} | {r.latency_ms(99):.1f} |"
        )
    return "\n".join(lines)


def read_sentences(args: argparse.Namespace) -> tuple[list[str], str]:
    source = args.source_file or args.data / "test_2016_flickr.de"
    if not source.exists():
        raise SystemExit(f"{source}: not found (give --data <multi30k folder> or --source-file <text file>)")
    lines = [line.strip() for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise SystemExit(f"{source}: no sentences")
    return [lines[i % len(lines)] for i in range(args.requests)], source.name


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.repository.is_dir():
        raise SystemExit(f"{args.repository}: no model repository (export a bundle, or give --repository)")
    sentences, source_name = read_sentences(args)
    started_at = now()
    where = machine()
    print(f"{where}\n{len(sentences)} requests per level from {source_name}, beam {args.beam_size}", flush=True)
    streamed: list[tuple[str, int, Result]] = []
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        services = {mode: service(mode, args, Path(tmp)) for mode in args.modes}
        try:
            for s in services.values():
                s.launch()
            for s in services.values():
                s.wait_ready(timeout=300)
            schedulers = {}
            for mode, s in services.items():
                info = httpx.get(s.url + "/v1/models", timeout=10).json()["models"][0]
                schedulers[mode] = info.get("scheduler", mode)
            print(
                f"serving {info['name']} v{info['version']} ({info['variant']}, {info['providers'][0]}); "
                f"schedulers {schedulers}",
                flush=True,
            )
            for s in services.values():  # warm-up, not measured
                asyncio.run(closed_loop(s.url, sentences[: args.warmup], 1, args.beam_size, args.model, "warm-up"))
            rows, rounds = [], []
            for clients in args.clients:  # every mode per level, back to back: background load hits all alike
                runs: dict[str, list[Result]] = {mode: [] for mode in services}
                for r in range(args.repeats):  # rounds interleaved, the modes' order rotated: drift hits all alike
                    order = list(services.items())
                    for mode, s in order[r % len(order) :] + order[: r % len(order)]:
                        runs[mode].append(measure(s, mode, sentences, clients, args))
                rows.append((clients, {mode: pooled(results) for mode, results in runs.items()}))
                rounds.append((clients, runs))
            if args.stream_clients:
                for mode, s in services.items():
                    if mode != "off":
                        streamed.append(
                            (mode, args.stream_clients, measure(s, mode, sentences, args.stream_clients, args, True))
                        )
        finally:
            for s in services.values():
                s.stop()
    result = table(rows, schedulers)
    if args.repeats > 1:
        result += "\n\n" + round_lines(rounds)
    print("\n" + result)
    if streamed:
        print("\n" + stream_table(streamed))
    command = "python -m bench.serving " + shlex.join(argv if argv is not None else sys.argv[1:])
    section = [
        "## HTTP service: continuous vs dynamic batching vs off",
        "",
        f"- command: `{command}`",
        f"- date: {started_at}",
        f"- machine: {where}",
        f"- model: {info['name']} v{info['version']}, variant {info['variant']} on {info['providers'][0]}; "
        f"threads intra {args.threads} / inter 1, engine workers {args.workers}",
        f"- load: {len(sentences)} requests of one sentence each per row, mode and round ({source_name}; "
        f"{args.repeats} round(s), the modes interleaved, a row pools its rounds: sent/s = all sentences over all "
        "seconds, latency percentiles over all requests, server CPU ms/sent the median round), "
        f"beam {args.beam_size}; continuous = MT_SCHEDULER=continuous, MT_MAX_LIVE_ROWS {args.max_live_rows}; "
        f"dynamic = MT_MAX_WAIT_MS {args.max_wait_ms:g}, MT_MAX_BATCH_SENTENCES {args.max_batch}; off = one "
        "sentence per batch",
        "- latency is client-side (request sent to response read); the clients run in the benchmark process "
        f"({'bench/raw_client.py connections' if args.client == 'raw' else 'httpx'}), the servers in their own; "
        "server CPU ms/sent = the server process's utime + stime (/proc) over the row's "
        "sentences; mean batch = sentences per engine batch (dynamic, off) or rows per live decoder step "
        "(continuous); mean whole batch = sentences per whole engine batch in every mode (continuous runs plain "
        "requests with an n-gram block, embeddings and attention in whole batches; nan: none ran)",
        "",
        result,
        "",
    ]
    if streamed:
        section += ['Streaming (`"stream": true`), time to the first delta event:', "", stream_table(streamed), ""]
    if not args.no_write:
        write_section(args.output, "bench/serving.py", "\n".join(section))
        print(f"\nwrote {args.output}")
    return 0 if all(r.errors == 0 for _, results in rows for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
