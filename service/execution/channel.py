"""One engine worker process and its socket (service/execution/remote.py starts and supervises them).

``spawn`` starts ``python -m service.execution.engine_process`` with one end of a socket pair, sends it its set-up
and waits until its engine is warm. ``Channel`` sends calls (one frame each: a pickle of protocol 5) from any thread
and waits for their answers, which one reader thread hands back; when the process ends, the reader sees the socket
close at once, names how it ended (``exit_cause``: the signal's name or ``exit_<code>``), tells the supervisor, and
fails every call still in flight with ``WorkerDied``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository root: the worker process imports the same packages
START_TIMEOUT_S = 300.0  # a worker process that is not warm within this is killed (the start failed)
PAGE = os.sysconf("SC_PAGE_SIZE")

log = logging.getLogger(__name__)


class WorkerDied(Exception):
    """The worker process ended while a call was in flight (or before it was sent)."""


def exit_cause(code: int | None) -> str:
    """The metric label of how a process ended: SIGSEGV, SIGKILL ... or exit_<code>."""
    if code is None:
        return "unknown"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal_{-code}"
    return f"exit_{code}"


class Channel:
    """One worker process and its socket: calls out, answers in (a reader thread), the process's end seen at once."""

    def __init__(self, model: str, process: subprocess.Popen, conn: Connection, on_death) -> None:
        self.model, self.process, self.conn, self.on_death = model, process, conn, on_death
        self.pid = process.pid
        self.dead = self.closing = False
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()  # dead and _pending together: no call registers after the reader failed them
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"engine-reader-{model}-{self.pid}", daemon=True)
        self._reader.start()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def call(self, op: str, *args: Any) -> Any:
        """Run ``op`` in the worker process; its result, its exception, or WorkerDied."""
        future: Future = Future()
        with self._lock:
            if self.dead:
                raise WorkerDied(f"engine worker process {self.pid} is gone")
            call_id = next(self._ids)
            self._pending[call_id] = future
        data = pickle.dumps((call_id, op, args), protocol=5)
        try:
            with self._send_lock:
                self.conn.send_bytes(data)
        except OSError:
            pass  # the reader sees the end and fails the future
        return future.result()

    def _read(self) -> None:
        while True:
            try:
                call_id, ok, value = pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                break
            except Exception:  # a frame that does not unpickle: the channel cannot be trusted any more
                if not self.closing:
                    log.exception("engine worker process %d sent an unreadable answer; ending it", self.pid)
                    self.process.kill()
                break
            with self._lock:
                future = self._pending.pop(call_id, None)
            if future is not None:
                (future.set_result if ok else future.set_exception)(value)
        with self._lock:
            self.dead = True
            pending, self._pending = list(self._pending.values()), {}
        try:
            code = self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            code = None
        cause = exit_cause(code)
        if not self.closing:
            self.on_death(self, cause)  # before the callers wake: they must wait for the new process
        for future in pending:
            future.set_exception(WorkerDied(f"engine worker process {self.pid} ended ({cause})"))

    def rss_mb(self) -> float:
        """Resident memory of the worker process, MiB (0 once it is gone)."""
        try:
            with open(f"/proc/{self.pid}/statm", "rb") as f:
                return int(f.read().split()[1]) * PAGE / (1 << 20)
        except (OSError, IndexError, ValueError):
            return 0.0

    def close(self, wait_s: float = 5.0) -> None:
        """End the process: ``exit`` when it still listens, then SIGKILL when it has not ended within ``wait_s``."""
        self.closing = True
        if not self.dead:
            threading.Thread(target=self._ask_exit, daemon=True).start()
        try:
            self.process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=wait_s)  # it sees the socket end; closing the socket under it would race
        self.conn.close()

    def _ask_exit(self) -> None:
        with contextlib.suppress(Exception):  # it ended first
            self.call("exit")


def spawn(model: str, bundle_path: Path, setup: tuple, on_death) -> tuple[Channel, dict[str, Any]]:
    """Start a worker process for ``bundle_path``; returns its channel and the engine's info once it is warm."""
    ours, theirs = socket.socketpair()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    command = [sys.executable, "-m", "service.execution.engine_process", str(theirs.fileno()), str(bundle_path)]
    process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
    theirs.close()
    conn = Connection(ours.detach())
    try:
        conn.send_bytes(pickle.dumps(setup, protocol=5))
        if not conn.poll(START_TIMEOUT_S):
            raise TimeoutError(f"not warm within {START_TIMEOUT_S:.0f} s")
        tag, ok, info = pickle.loads(conn.recv_bytes())
        if not ok:
            raise info
    except BaseException as exc:
        process.kill()
        code = process.wait()
        conn.close()
        if isinstance(exc, EOFError | OSError):
            raise RuntimeError(f"engine worker process of {model} ended while starting ({exit_cause(code)})") from exc
        raise
    return Channel(model, process, conn, on_death), info
