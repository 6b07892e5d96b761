"""Shared parts of bench/load.py and bench/overload.py: the server under test, request bodies, reports.

The server is either one these scripts start (``python -m service`` on a free loopback port, with the given
MT_* settings) or one already running (``--url``). Only loopback addresses are used.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.bench_machine import cpu_model

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reliability.md"

# Toy German words (the tiny test bundle knows them; a real de-en model translates them too).
WORDS = (
    "der die das ein eine mann frau hund katze kind ball rot blau gross klein auf unter spielt rennt sitzt und im park"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def proc_status(pid: int) -> dict[str, float] | None:
    """A process's resident memory (VmRSS, MiB), threads and open file descriptors, from /proc; None once gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss = re.search(r"^VmRSS:\s+(\d+) kB", text, re.MULTILINE)
    threads = re.search(r"^Threads:\s+(\d+)", text, re.MULTILINE)
    if not rss or not threads:  # a zombie has neither
        return None
    return {"rss_mb": int(rss.group(1)) / 1024, "threads": int(threads.group(1)), "fds": fds}


class ServerProcess:
    """``python -m service`` as a subprocess on a free loopback port, or an already running server (``url``; its
    ``pid`` when given lets /proc be read)."""

    def __init__(
        self,
        repository: Path | None,
        env: dict[str, str],
        log_path: Path,
        url: str | None = None,
        pid: int | None = None,
    ) -> None:
        self.external = url is not None
        self.external_pid = pid
        self.port = free_port() if url is None else None
        self.url = url.rstrip("/") if url else f"http://127.0.0.1:{self.port}"
        if not self.url.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
            raise SystemExit(f"only loopback servers may be loaded: {self.url}")
        self.env = {
            **os.environ,
            "MT_HOST": "127.0.0.1",
            "MT_PORT": str(self.port),
            "MT_PROVIDERS": os.environ.get("MT_PROVIDERS", "cpu"),
            "OMP_NUM_THREADS": "1",
            **({"MT_MODEL_REPOSITORY": str(Path(repository).resolve())} if repository else {}),
            **env,
        }
        self.settings = env
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.served = ""

    def start(self, timeout: float = 180.0) -> ServerProcess:
        if not self.external:
            with open(self.log_path, "ab") as out:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "service"], cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise SystemExit(f"the service exited with {self.process.returncode}; see {self.log_path}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    self.served = served_models(self.url, self.env.get("MT_API_KEYS", ""))
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"the service was not ready within {timeout} s; see {self.log_path}")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else self.external_pid

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self.external_pid is None or proc_status(self.external_pid) is not None

    def rss_mb(self) -> float | None:
        """Resident set size of the server process (VmRSS from /proc), in MiB; None when its pid is unknown."""
        status = proc_status(self.pid) if self.pid is not None else None
        return status["rss_mb"] if status else None

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def served_models(url: str, api_keys: str = "") -> str:
    """What the server really runs, from /v1/models: 'de-en v1 (fp32 on CPUExecutionProvider)'."""
    key = api_keys.split(",")[0].strip()
    headers = {"X-API-Key": key} if key else {}
    try:
        models = httpx.get(url + "/v1/models", headers=headers, timeout=10).json()["models"]
    except (httpx.HTTPError, KeyError, ValueError):
        return "unknown (/v1/models did not answer)"
    return ", ".join(f"{m['name']} v{m['version']} ({m['variant']} on {m['providers'][0]})" for m in models)


def sentences(source_file: Path | None, n: int, seed: int = 0, max_words: int = 8) -> list[str]:
    """``n`` distinct source sentences: lines of ``source_file``, or random strings of the toy German words."""
    rng = random.Random(seed)
    if source_file:
        lines = [line.strip() for line in source_file.read_text(encoding="utf-8").splitlines() if line.strip()]
        unique = list(dict.fromkeys(lines))
        rng.shuffle(unique)
        return unique[:n]
    words = WORDS.split()
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choice(words) for _ in range(rng.randint(1, max_words)))] = None
    return list(out)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def machine() -> str:
    cpu = cpu_model()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.node()}: {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load:.1f} at start"
    )


def command_line(module: str) -> str:
    """How this run was started: ``python -m <module>`` and its arguments."""
    return shlex.join(["python", "-m", module, *sys.argv[1:]])


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments every reliability script shares: which server to run or reach, its settings, the report."""
    p.add_argument("--repository", type=Path, default=ROOT / "model_repository", help="model repository to serve")
    p.add_argument("--url", help="load an already running loopback server instead of starting one")
    p.add_argument("--label", default="", help="what the repository holds, for the report (e.g. 'de-en v1')")
    p.add_argument("--env", action="append", default=[], metavar="MT_X=V", help="server setting (repeatable)")
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/reliability.md alone")


def report_header(title: str, module: str, args: argparse.Namespace, server: ServerProcess) -> list[str]:
    """The first lines of a report: title, command (``python -m <module> ...``), date, machine, the server and
    what it served."""
    settings = ", ".join(f"{k}={v}" for k, v in sorted(server.settings.items())) or "defaults"
    return [
        f"### {title}",
        "",
        f"- command: `{command_line(module)}`",
        f"- date: {now()}",
        f"- machine: {machine()}",
        f"- server: {'external ' + server.url if server.external else 'python -m service'}; "
        f"repository `{args.repository}`{' (' + args.label + ')' if args.label else ''}; settings: {settings}",
        f"- served: {server.served}",
    ]


def write_section(name: str, body: str, doc: Path = DOC) -> None:
    """Replace (or append) the marked section ``name`` of docs/reliability.md with ``body``."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Reliability\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text, encoding="utf-8")


class RawHttpClient:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: POST a prepared JSON body, read the status and
    headers. Far cheaper per request than httpx, so one Python process can offer many times the service's
    capacity (the overload test needs the load to be real, not limited by the client)."""

    def __init__(self, url: str, max_connections: int) -> None:
        host_port = url.split("://", 1)[1].rstrip("/")
        self.host, port = host_port.rsplit(":", 1)
        self.port = int(port)
        self.max_connections = max_connections
        self.open = 0
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    def request_bytes(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"{extra}Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    async def send(self, request: bytes, timeout: float = 60.0) -> tuple[int, dict[str, str], bytes]:
        """Send prepared request bytes; returns (status, lower-cased headers, body). Raises OSError / TimeoutError."""
        if self.idle:
            reader, writer = self.idle.pop()
        else:
            if self.open >= self.max_connections:
                raise ConnectionError("no connection free")
            self.open += 1
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
            except BaseException:
                self.open -= 1
                raise
        try:
            writer.write(request)
            async with asyncio.timeout(timeout):
                status_line = await reader.readline()
                if not status_line:
                    raise ConnectionError("the server closed the connection")
                headers = {}
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
        except BaseException:
            self.open -= 1
            writer.close()
            raise
        if headers.get("connection", "").lower() == "close":
            self.open -= 1
            writer.close()
        else:
            self.idle.append((reader, writer))
        return int(status_line.split()[1]), headers, body

    async def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()
