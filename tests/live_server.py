"""Start the real service (``python -m service``) as a subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
# what Python prints when a coroutine was called and dropped: a bug in the server (issue 55), failed at stop()
NEVER_AWAITED = "was never awaited"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    def __init__(
        self,
        repository: Path,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "MT_HOST": "127.0.0.1",
            "MT_PORT": str(self.port),
            "MT_MODEL_REPOSITORY": str(repository),
            "MT_PROVIDERS": "cpu",
            "MT_LOG_LEVEL": "info",
            "OMP_NUM_THREADS": "1",
            # the translation cache answers repeats without the engine: off unless a test asks for it, so tests
            # that send one text twice to exercise the engine, its queue or its faults still reach it
            "MT_CACHE_MB": "0",
            # its own state store (quotas, glossaries, documents): beside its log, else a new temporary directory
            "MT_STATE_DIR": str(log_path.parent / f"state-{self.port}") if log_path else tempfile.mkdtemp(prefix="mt-"),
            **(env or {}),
        }
        self.command = command or [sys.executable, "-m", "service"]
        # always a log, so that stop() can read it: a new temporary file when the test names none
        self.log_path = log_path or Path(tempfile.mkdtemp(prefix="mt-log-")) / "service.log"
        self.process: subprocess.Popen | None = None

    def start(self, wait_ready: bool = True, timeout: float = 60.0) -> LiveServer:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 (the child keeps it)
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        if self.log_path:
            out.close()
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"service exited with {self.process.returncode}; log: {self.log()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"service not ready within {timeout}s; log: {self.log()}")

    def log(self) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-4000:]
        return "(no log)"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        """Stops the server (its exit status); AssertionError when its log shows a coroutine never awaited."""
        code = self._stop(sig, timeout)
        if self.log_path and self.log_path.exists():
            log = self.log_path.read_text(errors="replace")
            if NEVER_AWAITED in log:
                at = log.index(NEVER_AWAITED)
                raise AssertionError(f"the server dropped a coroutine: {log[max(0, at - 600) : at + 200]}")
        return code

    def _stop(self, sig: int, timeout: float) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def __enter__(self) -> LiveServer:
        # ``with LiveServer(...).start() as s`` must not start a second process: it would fail to bind the port
        # while the first answered /readyz, and the first would outlive the block
        return self if self.process is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
