"""The engine of one model in a worker process of its own (MT_ENGINE_PROCESS=true), supervised from the server.

``ProcessEngineWorker`` has the in-process ``EngineWorker``'s face (service/execution/worker.py): ``start``,
``run_batch`` (the scheduler's BatchRunner), ``live`` (the continuous scheduler's LiveRunner), ``engine`` (what the
serving layer reads: tokenizers, limits, defaults; ``EngineFacade``), ``restarting``, ``retry_after``. The engine
itself (onnxruntime sessions, searches, the fused operators, the live decode) lives in the worker process
(service/execution/engine_process.py); calls cross one socket as pickles of protocol 5 (``Channel``).

Supervision:

- the worker process dies (any signal, ``os._exit``, the kernel's out-of-memory killer): the socket closes, the
  channel's reader sees it at once and fails every call in flight with ``WorkerDied``; ``restarting`` turns true
  (``/readyz`` 503), ``mt_engine_restarts_total{model,cause}`` counts it with the cause (the signal's name, or
  ``exit_<code>``), a log line says so, and a fresh process is started with the model's bundle and warmed up.
  A whole batch that was in flight is sent once more to the new process (a translation is idempotent:
  ``mt_engine_retried_batches_total``); when that one dies too, it fails with EngineRestarted (503, Retry-After).
  Sentences of the live decode (continuous batching) fail with EngineRestarted: their streams get a final error event.
  Calls made while the process restarts wait for it.
- a call raises in a live process: as in process, a probe translation tells the batch's own fault (the exception
  goes on) from a broken engine (the process is replaced, cause ``probe_failed``).
- MT_ENGINE_MEMORY_LIMIT_MB: a process whose resident memory passed it is replaced between batches (no call in
  flight, no live sentence), cause ``memory``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Hashable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from core.bundle import Bundle
from core.search import length_limits
from engine.chooser import decodes_live
from engine.decoding import TranslateOptions
from service.execution.engine_build import EngineSpec
from service.execution.facade import EngineFacade
from service.execution.work import Source
from service.observability.metrics import Metrics
from service.scheduling.errors import EngineRestarted
from service.scheduling.runners import Stats

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]  # the repository root: the worker process imports the same packages
START_TIMEOUT_S = 300.0  # a worker process that is not warm within this is killed (the start failed)
RESTART_ATTEMPTS = 3
RESTART_BACKOFF_S = 1.0  # before the second attempt; doubled before each further one
WAIT_READY_S = 600.0  # how long a call waits for a restart before it gives up with EngineRestarted
PROBE_TEXTS, PROBE_OPTIONS = ["Warm-up."], TranslateOptions(beam_size=2)
PAGE = os.sysconf("SC_PAGE_SIZE")


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


class ProcessEngineWorker:
    def __init__(
        self,
        model: str,
        bundle: Bundle,
        spec: EngineSpec,
        metrics: Metrics,
        workers: int = 1,
        live: bool = False,
        on_fatal=None,
        memory_limit_mb: float = 0.0,
        log_level: str = "info",
    ) -> None:
        self.model, self.bundle, self.metrics, self.on_fatal = model, bundle, metrics, on_fatal
        self._setup = (spec, workers, live, log_level)
        self.memory_limit_mb = memory_limit_mb
        self.engine: EngineFacade | None = None
        self.live: RemoteLive | None = None
        self.generation = 0
        self.restarting = False
        self.failed: str | None = None
        self.start_seconds = 1.0
        self._channel: Channel | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self.retried = 0  # whole batches sent again after their process died

    # --- starting, ending ------------------------------------------------------------------------
    def start(self, restart: bool = False) -> None:
        """Start the worker process and wait until its engine is warm (blocking); raises when it cannot start.
        ``restart``: it replaces a dead one (a new generation, published together with its channel)."""
        started = time.monotonic()
        channel, info = spawn(self.model, self.bundle.path, self._setup, self._died)
        if self.engine is None:
            self.engine = EngineFacade(self.bundle, info, self)
        else:
            self.engine.update(info)
        if info["live"] and self.live is None:
            self.live = RemoteLive(self)
        self.start_seconds = time.monotonic() - started
        with self._lock:
            if self._closed:  # taken out of service while it started
                channel.closing = True
            else:
                self._channel = channel
                if restart:
                    self.generation += 1
                    self.restarting = False
        if channel.closing:
            channel.close()
            return
        log.info("model %s: engine worker process %d warm (%.1f s)", self.model, channel.pid, self.start_seconds)
        self._ready.set()
        if channel.dead:  # it died before it was published: its reader found nobody to tell
            threading.Thread(target=self._restart, args=(channel, "exit_while_starting"), daemon=True).start()

    @property
    def pid(self) -> int | None:
        channel = self._channel
        return channel.pid if channel is not None else None

    def close(self) -> None:
        """The model is out of service: end its worker process (no restart)."""
        with self._lock:
            self._closed = True
            channel, self._channel = self._channel, None
        self._ready.set()  # a call still waiting fails (EngineRestarted) rather than waiting for a restart
        if channel is not None:
            channel.close()

    @property
    def retry_after(self) -> int:
        return max(1, math.ceil(self.start_seconds))

    # --- calls -----------------------------------------------------------------------------------
    def current(self) -> tuple[int, Channel]:
        """(generation, channel) of the warm worker process; waits while it restarts."""
        while True:
            if not self._ready.wait(WAIT_READY_S) or self.failed or self._closed:
                raise EngineRestarted(self.retry_after)
            with self._lock:
                if self._channel is not None and self._ready.is_set():
                    return self.generation, self._channel

    def call(self, op: str, *args: Any) -> Any:
        """One call on the current worker process (no retry): its result, its exception or WorkerDied."""
        return self.current()[1].call(op, *args)

    def run_batch(self, key: Hashable, payloads: list[Any]) -> tuple[list[Any], Stats]:
        """The scheduler's BatchRunner: one whole batch in the worker process; sent once more when it died."""
        for attempt in range(2):
            generation, channel = self.current()
            try:
                result = channel.call("batch", key, payloads)
            except WorkerDied as exc:
                if attempt:
                    raise EngineRestarted(self.retry_after) from exc
                self.retried += 1
                self.metrics.engine_retried_batches.labels(self.model).inc()
                continue
            except Exception as exc:
                self.check(generation, exc)
                raise
            self.after_call(channel)
            return result
        raise AssertionError("unreachable")

    def translate(self, texts: list[str], options: TranslateOptions | None = None) -> list:
        return self.call("translate", list(texts), options)

    def check(self, generation: int, exc: Exception) -> None:
        """A call of ``generation`` raised: EngineRestarted when its engine is dead (the process is then replaced);
        return when the engine still works (the failure was the call's own)."""
        with self._lock:
            channel = self._channel
            if generation != self.generation or channel is None:
                raise EngineRestarted(self.retry_after) from exc
        try:
            channel.call("translate", PROBE_TEXTS, PROBE_OPTIONS)
            return
        except WorkerDied:
            pass
        except Exception:
            log.exception("model %s: the engine fails its probe after a failed call; replacing its process", self.model)
            self._restart(channel, "probe_failed")
        raise EngineRestarted(self.retry_after) from exc

    def after_call(self, channel: Channel | None = None) -> None:
        """Between batches: replace a worker process grown past MT_ENGINE_MEMORY_LIMIT_MB (nothing in flight)."""
        channel = channel or self._channel
        if not self.memory_limit_mb or channel is None or channel.in_flight:
            return
        if self.live is not None and self.live.holding:
            return
        rss = channel.rss_mb()
        if rss > self.memory_limit_mb:
            log.warning(
                "model %s: engine worker process %d holds %.0f MiB, over MT_ENGINE_MEMORY_LIMIT_MB=%.0f: recycled",
                self.model,
                channel.pid,
                rss,
                self.memory_limit_mb,
            )
            threading.Thread(target=self._restart, args=(channel, "memory"), daemon=True).start()

    # --- restarts --------------------------------------------------------------------------------
    def _died(self, channel: Channel, cause: str) -> None:
        """The channel's reader saw its process end (not asked to)."""
        log.error("model %s: engine worker process %d died (%s); restarting it", self.model, channel.pid, cause)
        self._restart(channel, cause)

    def _restart(self, channel: Channel, cause: str) -> None:
        with self._lock:
            if channel is not self._channel or self._closed:
                return  # replaced already, or out of service
            self._ready.clear()
            self.restarting, self._channel = True, None
        self.metrics.engine_restarts.labels(self.model, cause).inc()
        channel.close()
        wait = RESTART_BACKOFF_S
        for attempt in range(1, RESTART_ATTEMPTS + 1):
            try:
                self.start(restart=True)  # a new generation, then _ready
            except Exception:
                log.exception("model %s: engine restart attempt %d of %d failed", self.model, attempt, RESTART_ATTEMPTS)
                if attempt < RESTART_ATTEMPTS:
                    time.sleep(wait)
                    wait *= 2
                continue
            log.warning("model %s: engine restarted after %s (%.1f s)", self.model, cause, self.start_seconds)
            return
        self.failed = f"model {self.model}: the engine failed and could not be restarted ({RESTART_ATTEMPTS} attempts)"
        log.error(self.failed)
        self._ready.set()  # waiting calls wake and fail
        if self.on_fatal is not None:
            self.on_fatal(self.failed)


class RemoteLive:
    """The continuous scheduler's live decode in the worker process. Sentence keys (the scheduler's queued items)
    stay here: the process sees small integers. When the process died, every call that held live sentences raises
    EngineRestarted, so that the scheduler fails them (503; a stream's final error event) and starts anew."""

    def __init__(self, worker: ProcessEngineWorker) -> None:
        self.worker = worker
        self._generation = worker.generation
        self._keys: dict[int, Hashable] = {}  # the process's key -> ours
        self._ids: dict[Hashable, int] = {}
        self._next = itertools.count()
        self._rows = 0

    @property
    def holding(self) -> bool:
        return bool(self._keys)

    @property
    def bytes_per_position(self) -> int:
        return int(self.worker.engine.info["bytes_per_position"])  # type: ignore[union-attr]

    @property
    def rows(self) -> int:
        return self._rows if self._generation == self.worker.generation else 0

    @staticmethod
    def accepts(options: Any, streaming: bool = False) -> bool:
        return decodes_live(options, streaming)

    def cost(self, options: TranslateOptions, source: Source) -> tuple[int, int]:
        engine = self.worker.engine
        limit = length_limits([source.length], engine.max_source_tokens, options.max_length)[0]  # type: ignore[union-attr]
        return options.beam_size, limit

    def _channel(self) -> Channel:
        """The current process's channel; EngineRestarted when live sentences were lost with an earlier one."""
        generation, channel = self.worker.current()
        if generation != self._generation:
            lost = bool(self._keys)
            self._clear(generation)
            if lost:
                raise EngineRestarted(self.worker.retry_after)
        return channel

    def _clear(self, generation: int) -> None:
        self._keys.clear()
        self._ids.clear()
        self._rows, self._generation = 0, generation

    def _call(self, op: str, *args: Any) -> Any:
        generation = self._generation
        channel = self._channel()
        try:
            return channel.call(op, *args)
        except WorkerDied as exc:
            raise EngineRestarted(self.worker.retry_after) from exc
        except Exception as exc:
            self.worker.check(generation, exc)
            raise

    def join(self, items: list[tuple[Hashable, TranslateOptions, Source, bool]]) -> tuple[list[tuple[Any, Any]], float]:
        sentences = []
        for key, options, source, stream in items:
            i = next(self._next)
            self._keys[i], self._ids[key] = key, i
            sentences.append((i, source.ids, options, stream))
        done, encode_s, self._rows = self._call("join", sentences)
        return [(self._forget(i), result) for i, result in done], encode_s

    def _forget(self, i: int) -> Hashable:
        key = self._keys.pop(i)
        self._ids.pop(key, None)
        return key

    def leave(self, key: Hashable) -> bool:
        i = self._ids.get(key)
        if i is None or self._generation != self.worker.generation:
            return False
        try:
            removed, self._rows = self._call("leave", i)
        except EngineRestarted:
            return False  # the next step says so
        self._forget(i)
        return removed

    def step(self):
        out, self._rows = self._call("step")
        out.progress = {self._keys[i]: tokens for i, tokens in out.progress.items() if i in self._keys}
        out.finished = [(self._forget(i), result) for i, result in out.finished]
        if not self._keys:
            self.worker.after_call()
        return out

    def reset(self) -> None:
        generation = self.worker.generation
        if generation == self._generation and not self.worker.restarting:
            with contextlib.suppress(EngineRestarted):
                self._call("reset")
        self._clear(self.worker.generation)
