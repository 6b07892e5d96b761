"""What the reliability scripts (load, overload, fairness, slow clients, soak, ASGI servers) share beyond
bench/harness.py: source sentences, the server arguments, the report's header and a raw HTTP client. Their reports
go into marked sections of docs/reliability.md (``DOC``).

The server is either one these scripts start (``python -m service`` on a free loopback port, with the given
MT_* settings) or one already running (``--url``).
"""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path

from bench.harness import ROOT, ServerProcess, command_line, machine, now, write_section

DOC = ROOT / "docs" / "reliability.md"

# Toy German words (the tiny test bundle knows them; a real de-en model translates them too).
WORDS = (
    "der die das ein eine mann frau hund katze kind ball rot blau gross klein auf unter spielt rennt sitzt und im park"
)


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


def server_parser(module: str, doc: str) -> argparse.ArgumentParser:
    """The argument parser of a reliability script (``python -m <module>``, its doc's first paragraph), with the
    arguments they all share: which server to run or reach, its settings, the report."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    p.add_argument("--repository", type=Path, default=ROOT / "model_repository", help="model repository to serve")
    p.add_argument("--url", help="load an already running loopback server instead of starting one")
    p.add_argument("--label", default="", help="what the repository holds, for the report (e.g. 'de-en v1')")
    p.add_argument("--env", action="append", default=[], metavar="MT_X=V", help="server setting (repeatable)")
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/reliability.md alone")
    return p


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


def passed(checks: list[str]) -> bool:
    """A run passes when it has checks and every one is "ok: ..."."""
    return bool(checks) and all(check.startswith("ok") for check in checks)


def verdict_line(checks: list[str]) -> str:
    return f"Verdict: **{'pass' if passed(checks) else 'FAIL'}**."


def publish(args: argparse.Namespace, marker: str, text: str) -> None:
    """Print the report and, unless --no-write, put it in its marked section ``marker`` of docs/reliability.md."""
    print(text)
    if not args.no_write:
        write_section(DOC, marker, text)
        print("wrote docs/reliability.md")


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
