"""The same application under four ASGI servers: throughput, latency and CPU, and what each does with slow clients.

Issue 19 asks to choose the slow-client mechanism by measurement: ``python -m service`` (uvicorn with our h11
protocol subclass, service/api/http_protocol.py: header and body timeouts, a connection cap, head limits) against
uvicorn with httptools (uvicorn's fastest parser, none of those protections), hypercorn (``--read-timeout``) and
granian (Rust HTTP, ``--http1-header-read-timeout``), all serving ``bench/asgi_app.py``'s app with the same
settings and one process each. For each server and client count: closed-loop clients (in this process) send
``--requests`` translate requests of one sentence each (beam ``--beam-size``); sent/s, p50/p99 latency, and the
server's CPU ms per request (utime + stime of the server and its child processes, from /proc via psutil). Then the
slow-client probe: ``--slow`` connections each send part of a request head and nothing more; while they are held,
``/healthz`` is fetched every 0.5 s on a new connection (answered? latency?), and ``--slow-wait`` s later (past
every server's header timeout, ``--header-timeout``) the probe counts the slow connections the server closed.

    pip install hypercorn granian   # bench-only; rows of servers that are not installed are skipped
    python -m bench.asgi_servers --repository model_repository --source-file path/to/test_2016_flickr.de

The table goes into docs/reliability.md (section ``bench/asgi_servers.py``) with the command and machine.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from bench.harness import ROOT, ServerProcess, command_line, free_port, machine, now, write_section
from bench.reliability_harness import DOC, sentences
from bench.serving import closed_loop

SERVERS = ("service", "uvicorn-httptools", "hypercorn", "granian")
PARTIAL_HEAD = b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


def server_command(name: str, port: int, header_timeout: int) -> list[str] | None:
    """The command line of ``name`` on ``port``; None when that server is not installed."""
    py = sys.executable
    if name == "service":
        return [py, "-m", "service"]  # MT_PORT, MT_HEADER_TIMEOUT_S from the environment
    module = {"uvicorn-httptools": "httptools", "hypercorn": "hypercorn", "granian": "granian"}[name]
    if importlib.util.find_spec(module) is None:
        return None
    app = "bench.asgi_app:app"
    if name == "uvicorn-httptools":
        return [py, "-m", "uvicorn", app, "--http", "httptools", "--host", "127.0.0.1", "--port", str(port),
                "--no-access-log", "--log-level", "warning"]  # fmt: skip
    if name == "hypercorn":
        return [py, "-m", "hypercorn", app, "--bind", f"127.0.0.1:{port}", "--workers", "1",
                "--read-timeout", str(header_timeout), "--log-level", "warning"]  # fmt: skip
    return [py, "-m", "granian", app, "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--http", "1", "--http1-header-read-timeout", str(header_timeout * 1000),
            "--log-level", "warning"]  # fmt: skip


@dataclass
class Row:
    server: str
    clients: int
    throughput: float
    p50_ms: float
    p99_ms: float
    cpu_ms: float
    errors: int


@dataclass
class SlowProbe:
    server: str
    opened: int = 0
    closed_by_server: int = 0
    probes: list[float] = field(default_factory=list)  # seconds; inf = no answer within 5 s
    first_close_s: float = float("nan")

    @property
    def answered(self) -> int:
        return sum(p != float("inf") for p in self.probes)


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its children (granian serves from a child process)."""
    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def server(name: str, args: argparse.Namespace, log: Path) -> ServerProcess | None:
    """``name`` serving the app with the same settings, not started yet; None when it is not installed."""
    port = free_port()
    command = server_command(name, port, args.header_timeout)
    if command is None:
        print(f"{name}: not installed, skipped", file=sys.stderr)
        return None
    env = {"MT_MODELS": args.model, "MT_PROVIDERS": "cpu", "MT_HEADER_TIMEOUT_S": str(args.header_timeout)}
    return ServerProcess(args.repository, env, log, command=command, port=port)


def load(name: str, server: ServerProcess, texts: list[str], args) -> list[Row]:
    rows, url = [], server.url
    asyncio.run(closed_loop(url, texts[:8], 1, args.beam_size, args.model, f"{name} warm-up"))
    for clients in args.clients:
        before = tree_cpu_seconds(server.pid)
        result = asyncio.run(closed_loop(url, texts, clients, args.beam_size, args.model, f"{name}, {clients} clients"))
        cpu = tree_cpu_seconds(server.pid) - before
        ok = max(1, result.sentences - result.errors)
        rows.append(
            Row(
                name,
                clients,
                result.throughput,
                result.latency_ms(50),
                result.latency_ms(99),
                cpu / ok * 1000,
                result.errors,
            )  # fmt: skip
        )
        r = rows[-1]
        print(f"{name:>18} {clients:>3} clients: {r.throughput:6.1f} req/s  p50 {r.p50_ms:6.1f} ms  "
              f"p99 {r.p99_ms:6.1f} ms  server CPU {r.cpu_ms:5.2f} ms/req  errors {r.errors}", flush=True)  # fmt: skip
    return rows


def slow_probe(name: str, url: str, args) -> SlowProbe:
    """Hold ``args.slow`` partial heads; probe /healthz; count the connections the server closed."""
    probe = SlowProbe(name)
    host, port = url.removeprefix("http://").split(":")
    socks: list[socket.socket] = []
    for _ in range(args.slow):
        try:
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(PARTIAL_HEAD)
            s.setblocking(False)
            socks.append(s)
        except OSError:
            break
    probe.opened = len(socks)
    opened_at = time.monotonic()
    open_now = set(range(len(socks)))
    while time.monotonic() - opened_at < args.slow_wait:
        started = time.perf_counter()
        try:
            ok = httpx.get(url + "/healthz", timeout=5).status_code == 200
            probe.probes.append(time.perf_counter() - started if ok else float("inf"))
        except httpx.HTTPError:
            probe.probes.append(float("inf"))
        for i in list(open_now):
            try:
                if socks[i].recv(65536) == b"":
                    open_now.discard(i)
            except BlockingIOError:
                continue
            except OSError:
                open_now.discard(i)
            else:
                open_now.discard(i)  # an answer (408): the server ends the connection after it
            if i not in open_now and probe.first_close_s != probe.first_close_s:
                probe.first_close_s = time.monotonic() - opened_at
        time.sleep(0.5)
    probe.closed_by_server = len(socks) - len(open_now)
    for s in socks:
        s.close()
    print(f"{name:>18}: {probe.closed_by_server}/{probe.opened} slow connections closed within {args.slow_wait} s; "
          f"/healthz answered {probe.answered}/{len(probe.probes)}", flush=True)  # fmt: skip
    return probe


def report(rows: list[Row], probes: list[SlowProbe], args) -> str:
    base = {r.clients: r for r in rows if r.server == "service"}
    lines = [
        "### The service under four ASGI servers (bench/asgi_servers.py)",
        "",
        f"- command: `{command_line('bench.asgi_servers')}`",
        f"- date: {now()}",
        f"- machine: {machine()}",
        f"- load: translate one sentence per request, beam {args.beam_size}, {args.requests} requests per row, "
        "closed-loop clients in the benchmark process; settings default (dynamic batching), one server process",
        "- service = `python -m service` (uvicorn + service/api/http_protocol.py on h11); the others serve "
        "`bench/asgi_app.py`'s app with their own HTTP layer",
        "",
        "| server | clients | req/s | vs service | p50 ms | p99 ms | server CPU ms/req | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = r.throughput / base[r.clients].throughput if r.clients in base else float("nan")
        lines.append(
            f"| {r.server} | {r.clients} | {r.throughput:.1f} | {ratio:.2f}x | {r.p50_ms:.1f} | {r.p99_ms:.1f} "
            f"| {r.cpu_ms:.2f} | {r.errors} |"
        )
    lines += [
        "",
        f"Slow clients: {args.slow} connections each send a partial request head and nothing more; header timeout "
        f"{args.header_timeout} s where the server has one; `/healthz` on a new connection every 0.5 s while they "
        f"are held; closed = connections the server ended within {args.slow_wait} s.",
        "",
        "| server | opened | closed by the server | first close after s | /healthz answered | /healthz max ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p in probes:
        answered = [x for x in p.probes if x != float("inf")]
        worst = f"{max(answered) * 1000:.0f}" if answered else "-"
        lines.append(
            f"| {p.server} | {p.opened} | {p.closed_by_server} | {p.first_close_s:.1f} "
            f"| {p.answered}/{len(p.probes)} | {worst} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.asgi_servers", description=__doc__.split("\n\n")[0])
    p.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    p.add_argument("--model", default="de-en")
    p.add_argument("--source-file", type=Path, help="sentences, one a line (default: built-in samples)")
    p.add_argument("--servers", nargs="+", default=list(SERVERS), choices=SERVERS)
    p.add_argument("--clients", type=int, nargs="+", default=[1, 64])
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--slow", type=int, default=1000, help="partial-head connections of the slow-client probe")
    p.add_argument("--header-timeout", type=int, default=5, help="seconds; every server that has such a setting")
    p.add_argument("--slow-wait", type=float, default=12.0, help="seconds the slow connections are held")
    p.add_argument("--no-write", action="store_true", help="print the table only")
    args = p.parse_args(argv)
    texts = sentences(args.source_file, args.requests, seed=3)
    log_dir = Path(tempfile.mkdtemp(prefix="mt-asgi-"))
    rows: list[Row] = []
    probes: list[SlowProbe] = []
    for name in args.servers:
        under_test = server(name, args, log_dir / f"{name}.log")
        if under_test is None:
            continue
        try:
            under_test.start()
            rows += load(name, under_test, texts, args)
            probes.append(slow_probe(name, under_test.url, args))
        finally:
            under_test.stop()
    text = report(rows, probes, args)
    print(text)
    if not args.no_write:
        write_section(DOC, "bench/asgi_servers.py", text)
        print("wrote docs/reliability.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
