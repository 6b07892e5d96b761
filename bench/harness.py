"""What every bench script shares: the server under test as a process on a free loopback port, the machine's
description, percentiles, the run's command and date, and the marked sections of the docs a report replaces.

A report says which CPU it ran on with its vector extensions (from /proc/cpuinfo where there is one): two VMs both
called "AMD EPYC" measured onnxruntime's int8 MatMul at 400 and 137 G(FL)OP/s (AVX-512 VNNI against AVX2 only).
Percentiles are numpy's (linear interpolation between the nearest ranks), in every script.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np

from core.cpu import cpu_flags as all_cpu_flags

ROOT = Path(__file__).resolve().parent.parent
VECTOR_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")  # in this order


# --- the machine -------------------------------------------------------------------------------
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_flags(text: str | None = None) -> list[str]:
    """The vector extensions in ``VECTOR_FLAGS`` the first CPU of /proc/cpuinfo (or ``text``) has."""
    present = all_cpu_flags(text)
    return [f for f in VECTOR_FLAGS if f in present]


def cpu_model(default: str | None = None) -> str:
    """The CPU's model name, with its vector extensions in brackets when /proc/cpuinfo lists them."""
    text = _cpuinfo()
    flags = cpu_flags(text)
    suffix = f" [{' '.join(flags)}]" if flags else ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip() + suffix
    return (platform.processor() or default or platform.machine() or "unknown CPU") + suffix


def machine() -> str:
    """The machine a report's figures come from: CPU, how many this process may use, Python, the load now."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return (
        f"{platform.node()}: {cpu_model('unknown CPU')}, {os.cpu_count()} CPUs ({usable} usable), "
        f"Python {platform.python_version()}; load average at start {load}"
    )


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


# --- the server under test ---------------------------------------------------------------------
def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """A server under test: ``command`` (default ``python -m service``) as a subprocess on a free loopback port
    with the given MT_* settings, or an already running server (``url``; its ``pid`` when given lets /proc be
    read). Only loopback addresses are used."""

    def __init__(
        self,
        repository: Path | None,
        env: dict[str, str],
        log_path: Path,
        url: str | None = None,
        pid: int | None = None,
        command: list[str] | None = None,
        port: int | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.external = url is not None
        self.external_pid = pid
        self.port = (port or free_port()) if url is None else None
        self.url = url.rstrip("/") if url else f"http://127.0.0.1:{self.port}"
        if not self.url.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
            raise SystemExit(f"only loopback servers may be loaded: {self.url}")
        self.env = {
            **os.environ,
            "MT_HOST": "127.0.0.1",
            "MT_PORT": str(self.port),
            "MT_PROVIDERS": os.environ.get("MT_PROVIDERS", "cpu"),
            "OMP_NUM_THREADS": "1",
            # benchmarks measure the engine and the server, not repeats answered from the translation cache; the
            # cache's own effect is bench/scale_out.py's, which sets MT_CACHE_MB itself
            "MT_CACHE_MB": os.environ.get("MT_CACHE_MB", "0"),
            **({"MT_MODEL_REPOSITORY": str(Path(repository).resolve())} if repository else {}),
            **env,
        }
        self.settings = env
        self.log_path = log_path
        self.command = command or [sys.executable, "-m", "service"]
        self.cwd = cwd or ROOT  # the source tree ``python -m service`` runs from (another checkout, to compare)
        self.process: subprocess.Popen | None = None
        self.served = ""

    def launch(self) -> ServerProcess:
        """Start the process (nothing for an external server); ``wait_ready`` waits for it."""
        if not self.external:
            with open(self.log_path, "ab") as out:
                self.process = subprocess.Popen(
                    self.command, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT
                )
        return self

    def wait_ready(self, timeout: float = 180.0) -> ServerProcess:
        """Until /readyz answers 200; then ``served`` says what it serves. Exits when the process dies first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise SystemExit(f"{self.command[-1]} exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    self.served = served_models(self.url, self.env.get("MT_API_KEYS", ""))
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"{self.command[-1]} was not ready within {timeout:.0f} s:\n{self.log_tail()}")

    def start(self, timeout: float = 180.0) -> ServerProcess:
        return self.launch().wait_ready(timeout)

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return f"(no log at {self.log_path})"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

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

    def cpu_seconds(self) -> float:
        """The server process's user + system CPU seconds so far (/proc/<pid>/stat)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int | None:
        """SIGTERM (the server drains), then its exit code; killed when it has not exited within a minute."""
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


# --- reports -----------------------------------------------------------------------------------
def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``; NaN when there are none."""
    return float(np.percentile(values, q)) if len(values) else float("nan")


def command_line(module: str) -> str:
    """How this run was started: ``python -m <module>`` and its arguments."""
    return shlex.join(["python", "-m", module, *sys.argv[1:]])


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def write_section(path: Path, marker: str, text: str) -> None:
    """Replace the section between ``<!-- marker: begin -->`` and ``<!-- marker: end -->`` in ``path`` (re-read
    just before writing), or append it; the rest of the file, other reports' sections included, stays as it is."""
    begin, end = f"<!-- {marker}: begin -->", f"<!-- {marker}: end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin in current and end in current:
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end) + "\n?", re.S)
        updated = pattern.sub(lambda _: block, current, count=1)
    else:
        updated = current.rstrip("\n") + "\n\n" + block if current else block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(updated, encoding="utf-8")
