"""HTTP service benchmark: dynamic batching on vs off, side by side, at several client concurrencies.

Starts the real service (``python -m service``) twice on the same bundle repository with the same thread
settings, once with MT_BATCHING=true and once with MT_BATCHING=false. For each client count, both servers get
the same requests (one German sentence each, from test_2016_flickr) in turn, so background load hits both
alike. Prints throughput (sentences/s), client-side p50/p95/p99 latency and the on/off ratios, and writes the
table with the command, date and machine into a marked section of docs/benchmarks.md.

    python -m bench.serving --data ../shared/data/multi30k --requests 400 --clients 1 8 64 --beam-size 4
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench.bench_machine import cpu_model

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- bench/serving.py: begin -->", "<!-- bench/serving.py: end -->"


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
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="MT_MAX_WAIT_MS of the batching server")
    p.add_argument("--max-batch", type=int, default=32, help="MT_MAX_BATCH_SENTENCES of the batching server")
    p.add_argument("--variant", default="auto", help="MT_VARIANT (auto, fp32, int8, fp16)")
    p.add_argument("--warmup", type=int, default=8, help="requests sent to each server before measuring")
    p.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md", help="results file to update")
    p.add_argument("--no-write", action="store_true", help="print only; leave the results file alone")
    args = p.parse_args(argv)
    if args.requests < 1 or any(c < 1 for c in args.clients):
        p.error("--requests and --clients must be positive")
    return args


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Service:
    """One ``python -m service`` subprocess on a free loopback port."""

    def __init__(self, label: str, args: argparse.Namespace, batching: bool, log_dir: Path) -> None:
        self.label = label
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"service-{label}.log"
        self.env = {
            **os.environ,
            "MT_HOST": "127.0.0.1",
            "MT_PORT": str(self.port),
            "MT_MODEL_REPOSITORY": str(args.repository.resolve()),
            "MT_MODELS": args.model,
            "MT_DEFAULT_MODEL": args.model,
            "MT_PROVIDERS": "cpu",
            "MT_VARIANT": args.variant,
            "MT_INTRA_OP_THREADS": str(args.threads),
            "MT_INTER_OP_THREADS": "1",
            "MT_ENGINE_WORKERS": str(args.workers),
            "MT_BATCHING": "true" if batching else "false",
            "MT_MAX_WAIT_MS": str(args.max_wait_ms),
            "MT_MAX_BATCH_SENTENCES": str(args.max_batch),
            "MT_MAX_QUEUE_SENTENCES": str(max(1024, 4 * max(args.clients))),
            "MT_REQUEST_TIMEOUT_S": "600",
            "MT_MAX_REQUEST_TIMEOUT_S": "600",
            "MT_LOG_LEVEL": "warning",
            "OMP_NUM_THREADS": str(args.threads),
        }
        self.process: subprocess.Popen | None = None

    def start(self) -> Service:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "service"], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.label} server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"{self.label} server not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def batch_totals(self) -> tuple[float, float]:
        """(engine batches, sentences in them) so far."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        count = total = 0.0
        for family in text_string_to_metric_families(text):
            if family.name == "mt_batch_size":
                for s in family.samples:
                    if s.name == "mt_batch_size_count":
                        count += s.value
                    elif s.name == "mt_batch_size_sum":
                        total += s.value
        return count, total


@dataclass
class Result:
    sentences: int
    errors: int
    seconds: float
    latencies: np.ndarray  # seconds, successful requests
    mean_batch: float

    @property
    def throughput(self) -> float:
        return (self.sentences - self.errors) / self.seconds

    def latency_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies, q) * 1000) if len(self.latencies) else float("nan")


async def _load(url: str, sentences: list[str], clients: int, beam: int, model: str, label: str) -> Result:
    latencies: list[float] = []
    errors = 0
    next_index = 0
    step = max(1, len(sentences) // 4)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal next_index, errors
        while next_index < len(sentences):
            text = sentences[next_index]
            next_index += 1
            if next_index % step == 0:
                print(f"  {label}: {next_index}/{len(sentences)} requests sent", file=sys.stderr, flush=True)
            started = time.perf_counter()
            response = await http.post(
                "/v1/translate", json={"texts": [text], "beam_size": beam, "model": model, "timeout_s": 600}
            )
            if response.status_code == 200:
                latencies.append(time.perf_counter() - started)
            else:
                errors += 1
                if errors <= 3:
                    print(f"  {label}: HTTP {response.status_code}: {response.text[:200]}", file=sys.stderr)

    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        seconds = time.perf_counter() - started
    return Result(len(sentences), errors, seconds, np.asarray(latencies), float("nan"))


def measure(service: Service, sentences: list[str], clients: int, args: argparse.Namespace) -> Result:
    label = f"batching {service.label:>3}, {clients:>3} clients"
    before = service.batch_totals()
    result = asyncio.run(_load(service.url, sentences, clients, args.beam_size, args.model, label))
    after = service.batch_totals()
    batches, total = after[0] - before[0], after[1] - before[1]
    result.mean_batch = total / batches if batches else float("nan")
    print(
        f"{label}: {result.throughput:7.1f} sent/s  p50 {result.latency_ms(50):7.1f} ms  "
        f"p95 {result.latency_ms(95):7.1f} ms  p99 {result.latency_ms(99):7.1f} ms  "
        f"mean batch {result.mean_batch:5.2f}  errors {result.errors}",
        flush=True,
    )
    return result


def table(rows: list[tuple[int, Result, Result]]) -> str:
    header = ["clients", "sent/s on", "sent/s off", "ratio on/off"]
    for q in (50, 95, 99):
        header += [f"p{q} ms on", f"p{q} ms off", f"p{q} on/off"]
    header += ["mean batch on", "errors on/off"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for clients, on, off in rows:
        ratio = on.throughput / off.throughput
        cells = [str(clients), f"{on.throughput:.1f}", f"{off.throughput:.1f}", f"{ratio:.2f}x"]
        for q in (50, 95, 99):
            a, b = on.latency_ms(q), off.latency_ms(q)
            cells += [f"{a:.1f}", f"{b:.1f}", f"{a / b:.2f}x"]
        cells += [f"{on.mean_batch:.2f}", f"{on.errors}/{off.errors}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> str:
    cpu = cpu_model("unknown CPU")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs (nproc), {cpu}; load average at start {load}"


def write_section(path: Path, section: str) -> None:
    """Replace this script's marked section of ``path`` (re-read just before writing), or append it."""
    block = f"{BEGIN}\n{section.rstrip()}\n{END}\n"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        after = rest.split(END, 1)[1].lstrip("\n")
        text = head + block + ("\n" + after if after else "")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


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
    started_at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = machine()
    print(f"{where}\n{len(sentences)} requests per level from {source_name}, beam {args.beam_size}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        services = {"on": Service("on", args, True, Path(tmp)), "off": Service("off", args, False, Path(tmp))}
        try:
            for s in services.values():
                s.start()
            for s in services.values():
                s.wait_ready()
            info = httpx.get(services["on"].url + "/v1/models", timeout=10).json()["models"][0]
            print(f"serving {info['name']} v{info['version']} ({info['variant']}, {info['providers'][0]})", flush=True)
            for s in services.values():  # warm-up, not measured
                asyncio.run(_load(s.url, sentences[: args.warmup], 1, args.beam_size, args.model, "warm-up"))
            rows = []
            for clients in args.clients:  # both modes per level, back to back: background load hits both alike
                on = measure(services["on"], sentences, clients, args)
                off = measure(services["off"], sentences, clients, args)
                rows.append((clients, on, off))
        finally:
            for s in services.values():
                s.stop()
    result = table(rows)
    print("\n" + result)
    command = "python -m bench.serving " + shlex.join(argv if argv is not None else sys.argv[1:])
    section = "\n".join(
        [
            "## HTTP service: dynamic batching on vs off",
            "",
            f"- command: `{command}`",
            f"- date: {started_at}",
            f"- machine: {where}",
            f"- model: {info['name']} v{info['version']}, variant {info['variant']} on {info['providers'][0]}; "
            f"threads intra {args.threads} / inter 1, engine workers {args.workers}",
            f"- load: {len(sentences)} requests of one sentence each per row and mode ({source_name}), "
            f"beam {args.beam_size}; batching on = MT_MAX_WAIT_MS {args.max_wait_ms:g}, "
            f"MT_MAX_BATCH_SENTENCES {args.max_batch}; off = MT_BATCHING=false",
            "- latency is client-side (request sent to response read); clients run in the benchmark process, "
            "on the same machine as the server",
            "",
            result,
            "",
        ]
    )
    if not args.no_write:
        write_section(args.output, section)
        print(f"\nwrote {args.output}")
    return 0 if all(on.errors == off.errors == 0 for _, on, off in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
