"""Slow and idle clients: thousands of connections that send part of a request and then nothing, from several
client processes, while a prober checks that /healthz and /v1/translate are still answered.

Each attacking connection connects, sends its ``--mode`` bytes and then waits for the server to close it:

- ``idle``: nothing at all;
- ``header``: a partial request head (``POST /v1/translate HTTP/1.1``, a Host header, half a header line);
- ``trickle``: the same, then one more header byte every ``--trickle-s`` seconds (never ends the head);
- ``body``: a whole head announcing a 1,000-byte JSON body, then 10 bytes of it.

The attackers run in ``--processes`` processes (each raises its soft file-descriptor limit to its hard limit), so
one process's limit does not cap the attack. While they hold their connections (``--hold`` seconds after the last
one opened), the prober sends GET /healthz and POST /v1/translate on a fresh connection every
``--probe-interval`` seconds and records status and latency; the same probes run for ``--baseline-s``
seconds before the attack, as the reference on the same machine. The report: connections opened and refused, how many
the server closed and how soon after opening, the probes' statuses and latencies, and the server's open file
descriptors (from /proc). The verdict asks that every probe be answered 200 within ``--max-probe-s`` and, with
``--expect-close-s``, that every attacking connection be closed by the server within that many seconds.

    python -m bench.slow_clients --connections 20800 --processes 2 --mode header --hold 40 --expect-close-s 30

Against ``make serve`` (the service's own defaults), from a second shell:

    python -m bench.slow_clients --url http://127.0.0.1:8000 --pid "$(pgrep -f 'python -m service' | head -1)" \\
        --connections 20800 --processes 2 --mode header --hold 40 --expect-close-s 30

Loopback only. A started server gets ``--env`` settings (e.g. ``--env MT_HEADER_TIMEOUT_S=5``).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import resource
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import ServerProcess, percentile, proc_status
from bench.reliability_harness import passed, publish, report_header, server_parser

MODES = ("idle", "header", "trickle", "body")


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def first_bytes(mode: str, host: str) -> bytes:
    if mode == "idle":
        return b""
    if mode == "body":
        return (
            f"POST /v1/translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000\r\n\r\n"
            '{"texts": '
        ).encode()
    return f"POST /v1/translate HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode()


@dataclass
class AttackResult:
    opened: int = 0
    failed: int = 0  # connect refused, reset or timed out
    close_after_s: list[float] = field(default_factory=list)  # seconds from open to the server's close
    still_open: int = 0
    open_seconds: float = 0.0  # time to open all of them
    fd_limit: int = 0


async def _hold(
    host: str,
    port: int,
    data: bytes,
    mode: str,
    trickle_s: float,
    stop: asyncio.Event,
    result: AttackResult,
    sem: asyncio.Semaphore,
) -> None:
    async with sem:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
            if data:
                writer.write(data)
        except (OSError, TimeoutError):
            result.failed += 1
            return
    opened = time.monotonic()
    result.opened += 1
    try:
        while not stop.is_set():
            try:
                chunk = await asyncio.wait_for(reader.read(4096), trickle_s if mode == "trickle" else 1.0)
            except TimeoutError:
                if mode == "trickle":
                    writer.write(b"x")
                continue
            if not chunk:  # the server closed it (any answer it sent first, e.g. a 408, is read and dropped)
                result.close_after_s.append(time.monotonic() - opened)
                return
        result.still_open += 1
    except OSError:  # a reset is a close too
        result.close_after_s.append(time.monotonic() - opened)
    finally:
        writer.close()


async def _attack(host: str, port: int, n: int, mode: str, trickle_s: float, ready, stop_flag) -> AttackResult:
    result = AttackResult(fd_limit=raise_fd_limit())
    stop = asyncio.Event()
    sem = asyncio.Semaphore(256)  # connects in flight at once
    data = first_bytes(mode, f"{host}:{port}")
    start = time.monotonic()
    tasks = [asyncio.create_task(_hold(host, port, data, mode, trickle_s, stop, result, sem)) for _ in range(n)]
    while result.opened + result.failed < n:
        await asyncio.sleep(0.05)
    result.open_seconds = time.monotonic() - start
    ready.put((result.opened, result.failed))
    while not stop_flag.is_set():
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return result


def attacker(host: str, port: int, n: int, mode: str, trickle_s: float, ready, stop_flag, out) -> None:
    out.put(asyncio.run(_attack(host, port, n, mode, trickle_s, ready, stop_flag)))


@dataclass
class Probe:
    at_s: float
    path: str
    status: int | str
    latency_s: float


PROBE_BODY = b'{"texts": ["ein hund"], "beam_size": 1}'


def probe_once(url: str, path: str, started: float, timeout: float = 10.0) -> Probe:
    """One request on a new connection (as a new client would), raw: the time is the server's, not a client
    library's set-up."""
    host, port = url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    if path == "/healthz":
        data = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    else:
        data = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(PROBE_BODY)}\r\n\r\n"
        ).encode() + PROBE_BODY
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.settimeout(max(0.1, timeout - (time.monotonic() - t0)))
            sock.sendall(data)
            response = b""
            while chunk := sock.recv(65536):  # Connection: close: the answer ends with the connection
                response += chunk
        status: int | str = int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else "no answer"
    except (OSError, ValueError, IndexError) as exc:
        status = type(exc).__name__
    return Probe(t0 - started, path, status, time.monotonic() - t0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = server_parser("bench.slow_clients", __doc__)
    p.add_argument("--pid", type=int, help="pid of the --url server, to read its open descriptors from /proc")
    p.add_argument("--connections", type=int, default=2000, help="attacking connections in all")
    p.add_argument("--processes", type=int, default=2, help="client processes sharing them")
    p.add_argument("--mode", choices=MODES, default="header")
    p.add_argument("--trickle-s", type=float, default=2.0, help="trickle: seconds between bytes")
    p.add_argument("--hold", type=float, default=20.0, help="seconds to hold after the last connection opened")
    p.add_argument("--probe-interval", type=float, default=0.5)
    p.add_argument("--baseline-s", type=float, default=5.0, help="probe this long before the attack (reference)")
    p.add_argument("--max-probe-s", type=float, default=1.0, help="verdict: every probe answered 200 within this")
    p.add_argument("--expect-close-s", type=float, help="verdict: the server closes every attacker within this")
    p.add_argument("--open-timeout", type=float, default=300.0, help="give up waiting for the attackers to open")
    args = p.parse_args(argv)
    if args.connections < 1 or args.processes < 1:
        p.error("--connections and --processes must be positive")
    return args


def run_attack(args: argparse.Namespace, server: ServerProcess) -> tuple[list[AttackResult], list[Probe], dict]:
    host_port = server.url.split("://", 1)[1]
    host, port = host_port.rsplit(":", 1)
    ctx = mp.get_context("spawn")
    ready, out, stop_flag = ctx.Queue(), ctx.Queue(), ctx.Event()
    shares = [
        args.connections // args.processes + (i < args.connections % args.processes) for i in range(args.processes)
    ]
    procs = [
        ctx.Process(target=attacker, args=(host, int(port), n, args.mode, args.trickle_s, ready, stop_flag, out))
        for n in shares
    ]
    probes: list[Probe] = []
    fds_max = 0
    started = time.monotonic()
    for path in ("/healthz", "/v1/translate", "/v1/translate"):  # warm-up: first translations initialise lazily
        probe_once(server.url, path, started, timeout=60)
    before: list[Probe] = []  # the same probes without the attack, side by side with those under it
    baseline_start = time.monotonic()
    while time.monotonic() - baseline_start < args.baseline_s:
        before += [probe_once(server.url, path, started) for path in ("/healthz", "/v1/translate")]
        time.sleep(args.probe_interval)
    started = time.monotonic()
    for proc in procs:
        proc.start()
    try:
        reported, next_probe, hold_until = 0, started, None
        deadline = started + args.open_timeout
        while True:
            now = time.monotonic()
            while reported < len(procs) and not ready.empty():
                ready.get()
                reported += 1
            if reported == len(procs) and hold_until is None:
                hold_until = now + args.hold
                print(
                    f"all {args.connections} attempted after {now - started:.1f} s; holding {args.hold:.0f} s",
                    flush=True,
                )
            if hold_until is not None and now >= hold_until:
                break
            if hold_until is None and now > deadline:
                print("the attackers did not finish opening; stopping", flush=True)
                break
            if now >= next_probe:
                for path in ("/healthz", "/v1/translate"):
                    probes.append(probe_once(server.url, path, started))
                next_probe = time.monotonic() + args.probe_interval
                if server.pid is not None and (status := proc_status(server.pid)):
                    fds_max = max(fds_max, int(status["fds"]))
            time.sleep(0.05)
    finally:
        stop_flag.set()
        results = [out.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(30)
    after = [probe_once(server.url, path, started) for path in ("/healthz", "/v1/translate")]
    return results, probes + after, {"fds_max": fds_max, "alive": server.alive(), "before": before}


def verdict(args: argparse.Namespace, results: list[AttackResult], probes: list[Probe], info: dict) -> list[str]:
    checks = []
    slow = [p for p in probes if p.status != 200 or p.latency_s > args.max_probe_s]
    checks.append(
        f"{'ok' if not slow else 'FAIL'}: {len(probes) - len(slow)}/{len(probes)} probes answered 200 "
        f"within {args.max_probe_s} s"
    )
    checks.append(f"{'ok' if info['alive'] else 'FAIL'}: the server is {'alive' if info['alive'] else 'gone'}")
    if args.expect_close_s is not None:
        closes = [s for r in results for s in r.close_after_s]
        opened = sum(r.opened for r in results)
        late = [s for s in closes if s > args.expect_close_s]
        open_left = sum(r.still_open for r in results)
        ok = not late and not open_left and len(closes) == opened
        checks.append(
            f"{'ok' if ok else 'FAIL'}: {len(closes) - len(late)}/{opened} attacking connections closed "
            f"by the server within {args.expect_close_s} s ({open_left} still open at the end)"
        )
    return checks


def report(args, server, results: list[AttackResult], probes: list[Probe], info: dict, checks: list[str]) -> str:
    closes = sorted(s for r in results for s in r.close_after_s)
    lines = report_header("Slow and idle clients (bench/slow_clients.py)", "bench.slow_clients", args, server)
    lines += [
        f"- attack: {args.connections} connections ({args.mode}) from {args.processes} processes "
        f"(client fd limit {min(r.fd_limit for r in results)}), held {args.hold:.0f} s after the last opened",
        "",
        "| opened | refused or failed | seconds to open | closed by server | close after s (p50 / max) "
        "| still open at end | server fds max |",
        "|---:|---:|---:|---:|---|---:|---:|",
        f"| {sum(r.opened for r in results)} | {sum(r.failed for r in results)} "
        f"| {max(r.open_seconds for r in results):.1f} | {len(closes)} "
        f"| {percentile(closes, 50):.1f} / {max(closes, default=float('nan')):.1f} "
        f"| {sum(r.still_open for r in results)} | {info['fds_max'] or 'n/a'} |",
        "",
        "| probe | when | sent | 200 | other statuses or errors | p50 s | p99 s | max s |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for path, when, group in [
        (path, when, group)
        for path in ("/healthz", "/v1/translate")
        for when, group in (("before", info.get("before", [])), ("attack", probes))
    ]:
        mine = [p for p in group if p.path == path]
        other: dict[str, int] = {}
        for p in mine:
            if p.status != 200:
                other[str(p.status)] = other.get(str(p.status), 0) + 1
        lat = [p.latency_s for p in mine]
        lines.append(
            f"| {path} | {when} | {len(mine)} | {sum(p.status == 200 for p in mine)} | {other or '-'} "
            f"| {percentile(lat, 50):.3f} | {percentile(lat, 99):.3f} | {max(lat, default=0):.3f} |"
        )
    lines += ["", "Verdict:", *[f"- {c}" for c in checks]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_fd_limit()
    env = dict(item.split("=", 1) for item in args.env) if not args.url else {}
    log_dir = Path(tempfile.mkdtemp(prefix="mt-slow-clients-"))
    server = ServerProcess(
        None if args.url else args.repository, env, log_dir / "service.log", url=args.url, pid=args.pid
    ).start()
    try:
        results, probes, info = run_attack(args, server)
    finally:
        server.stop()
    checks = verdict(args, results, probes, info)
    publish(args, "bench/slow_clients.py", report(args, server, results, probes, info, checks))
    return 0 if passed(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
