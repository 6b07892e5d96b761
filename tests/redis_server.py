"""A real redis-server (Debian's package) on a free loopback port, for tests of the shared state store.

``scripts/install-test-tools.sh`` installs it (``make test``); tests skip with that reason where it is missing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from live_server import free_port

REDIS_SERVER = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(
    REDIS_SERVER is None, reason="redis-server is not installed (scripts/install-test-tools.sh installs it as root)"
)


class RedisServer:
    """``start`` / ``kill`` / ``start`` again on the same port (a restart loses the data: no persistence)."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.port, self.workdir = port or free_port(), workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    def start(self) -> RedisServer:
        command = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command += ["--dir", str(self.workdir)]
        log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"redis-server on port {self.port} did not start")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall(b"FLUSHALL\r\n")
            assert sock.recv(16).startswith(b"+OK")
