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
  Sentences of the live decode (continuous batching) that do not stream join the new process's decode once
  (remote_live.py); streamed ones fail with EngineRestarted (their streams get a final error event). Calls made
  while the process restarts wait for it.
- a call raises in a live process: as in process, a probe translation tells the batch's own fault (the exception
  goes on) from a broken engine (the process is replaced, cause ``probe_failed``).
- MT_ENGINE_MEMORY_LIMIT_MB: a process whose resident memory passed it is replaced between batches (no call in
  flight, no live sentence), cause ``memory``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Hashable
from typing import Any

from core.bundle import Bundle
from engine.decoding import TranslateOptions
from service.execution.channel import Channel, WorkerDied, spawn
from service.execution.engine_build import EngineSpec
from service.execution.facade import EngineFacade
from service.execution.remote_live import RemoteLive
from service.execution.worker import restart_with_retries
from service.observability.metrics import Metrics
from service.scheduling.errors import EngineRestarted
from service.scheduling.runners import Stats

log = logging.getLogger(__name__)

WAIT_READY_S = 600.0  # how long a call waits for a restart before it gives up with EngineRestarted
PROBE_TEXTS, PROBE_OPTIONS = ["Warm-up."], TranslateOptions(beam_size=2)


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
        self.failed = restart_with_retries(lambda: self.start(restart=True), self.model)  # a new generation, _ready
        if self.failed is None:
            log.warning("model %s: engine restarted after %s (%.1f s)", self.model, cause, self.start_seconds)
            return
        self._ready.set()  # waiting calls wake and fail
        if self.on_fatal is not None:
            self.on_fatal(self.failed)
