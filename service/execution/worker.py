"""The engine of one model as a supervised in-process worker: built, probed, and rebuilt after a fault.

``EngineWorker`` builds the engine (onnxruntime sessions, a warm-up translation), hands the scheduler its batch
runner (``run_batch``) and its live decode (``SupervisedLive``), the one supervised wrapper of each kind of
runner (service/scheduling/runners.py), and supervises them. When an engine call raises,
a probe (one short translation on the same engine) tells the two failures apart:

- the probe passes: the fault was the batch's own; the exception goes on and fails that batch alone (BatchFailed,
  500 — docs/reliability.md guarantee 7);
- the probe fails too: the engine itself no longer works (e.g. sessions left broken by a device fault). The worker
  restarts it: ``restarting`` is true (``/readyz`` answers 503), the engine is built again from its bundle (new
  sessions, warm-up), ``mt_engine_restarts_total{model,cause="probe_failed"}`` counts it, and the work the dead
  engine held fails with EngineRestarted (503 with Retry-After). Batches that wait for the worker meanwhile, and work
  still queued, run on the fresh engine.

When the engine cannot be built again (RESTART_ATTEMPTS tries), ``on_fatal`` is told why: the registry marks itself
failed and the process exits non-zero (service/__main__.py), so that its own supervisor starts a new one.

Here decoding stays in the server process: a native crash in onnxruntime (a segfault, an abort) ends the process
and every request in it; a run that never returns is not detected. MT_ENGINE_PROCESS=true runs the engine in a
worker process instead (service/execution/remote.py ``ProcessEngineWorker``, the same face), where such a crash
costs a restart of that process.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from core.search import length_limits
from engine.chooser import decodes_live
from engine.decoding import TranslateOptions
from engine.engine import Engine
from engine.live import LiveBatch, StepOutput, supports_live
from service.execution.work import Source, engine_runner
from service.observability.metrics import Metrics
from service.scheduling.errors import EngineRestarted
from service.scheduling.runners import BatchRunner, Stats

log = logging.getLogger(__name__)

# wrap_runner(runner, engine) -> runner: how tests put a fault injector between a scheduler and its engine
RunnerWrapper = Callable[[BatchRunner, Engine], BatchRunner]

PROBE_TEXTS, PROBE_OPTIONS = ["Warm-up."], TranslateOptions(beam_size=2)  # the warm-up translation, also the probe
RESTART_ATTEMPTS = 3
RESTART_BACKOFF_S = 1.0  # before the second attempt; doubled before each further one


def restart_with_retries(start: Callable[[], None], model: str) -> str | None:
    """Call ``start`` until it succeeds, RESTART_ATTEMPTS times at the most with a doubling back-off; None when it
    did, else why the engine is out of service (logged)."""
    wait = RESTART_BACKOFF_S
    for attempt in range(1, RESTART_ATTEMPTS + 1):
        try:
            start()
        except Exception:
            log.exception("model %s: engine restart attempt %d of %d failed", model, attempt, RESTART_ATTEMPTS)
            if attempt < RESTART_ATTEMPTS:
                time.sleep(wait)
                wait *= 2
            continue
        return None
    failed = f"model {model}: the engine failed and could not be restarted ({RESTART_ATTEMPTS} attempts)"
    log.error(failed)
    return failed


class EngineWorker:
    def __init__(
        self,
        model: str,
        build: Callable[[], Engine],
        metrics: Metrics,
        wrap_runner: RunnerWrapper | None = None,
        live: bool = False,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        """``build`` creates the engine (blocking); ``live``: also build a live decode (continuous batching)."""
        self.model, self._build, self.metrics = model, build, metrics
        self.wrap_runner, self.want_live, self.on_fatal = wrap_runner, live, on_fatal
        self.engine: Engine | None = None
        self._runner: BatchRunner | None = None
        self.live: SupervisedLive | None = None  # a continuous scheduler's; None when not asked or unsupported
        self.generation = 0  # engines built since the first one
        self.restarting = False
        self.failed: str | None = None
        self.start_seconds = 1.0  # how long the last build took (Retry-After of EngineRestarted)
        self._lock = threading.Lock()  # held while the engine is probed or rebuilt

    # --- building ------------------------------------------------------------------------------
    def start(self) -> None:
        """Build the engine, warm it up, wrap its runner; blocking. Raises when the engine cannot be built."""
        started = time.monotonic()
        engine = self._build()
        engine.translate(PROBE_TEXTS, PROBE_OPTIONS)
        runner = engine_runner(engine)
        if self.wrap_runner is not None:
            runner = self.wrap_runner(runner, engine)
        self.engine, self._runner = engine, runner
        if self.want_live and self.live is None and supports_live(engine):
            self.live = SupervisedLive(self)
        self.start_seconds = time.monotonic() - started

    def close(self) -> None:
        """The model is out of service (nothing to end: the engine goes with its last reference)."""

    @property
    def retry_after(self) -> int:
        """Seconds a client should wait after EngineRestarted: what building the engine took, at least 1."""
        return max(1, math.ceil(self.start_seconds))

    # --- the scheduler's runner ------------------------------------------------------------------
    def run_batch(self, key: Hashable, payloads: list[Any]) -> tuple[list[Any], Stats]:
        """The scheduler's BatchRunner: one batch on the current engine (waiting while it is probed or rebuilt)."""
        with self._lock:
            generation, runner = self.generation, self._runner
        try:
            return runner(key, payloads)  # type: ignore[misc]
        except Exception as exc:
            self.check(generation, exc)
            raise

    def check(self, generation: int, exc: Exception) -> None:
        """An engine call of ``generation`` raised ``exc``: raise EngineRestarted when that engine is dead (it was
        rebuilt, by this call or another); return when the engine still works (the failure was the call's own)."""
        if self._recover(generation):
            raise EngineRestarted(self.retry_after) from exc

    def _recover(self, generation: int) -> bool:
        with self._lock:
            if generation != self.generation:
                return True  # the engine this work ran on was replaced meanwhile
            try:
                self.engine.translate(PROBE_TEXTS, PROBE_OPTIONS)  # type: ignore[union-attr]
                return False
            except Exception:
                log.exception("model %s: the engine fails its probe after a failed call; restarting it", self.model)
            self._restart()
            return True

    def _restart(self) -> None:
        """Build a fresh engine (the lock is held); ``failed`` and ``on_fatal`` when no attempt succeeds."""
        self.restarting = True
        self.metrics.engine_restarts.labels(self.model, "probe_failed").inc()
        self.failed = restart_with_retries(self.start, self.model)
        if self.failed is None:
            self.generation += 1
            self.restarting = False
            log.warning("model %s: engine restarted (%.1f s)", self.model, self.start_seconds)
            return
        if self.on_fatal is not None:
            self.on_fatal(self.failed)


class SupervisedLive:
    """The continuous scheduler's live decode (service/scheduling/runners.py LiveRunner): translations join a
    ``LiveBatch`` (engine/live.py) on the worker's current engine; embeddings and attention run as whole
    batches. A join or step that raises asks the worker whether the engine died (EngineRestarted) or only the step
    failed (the exception goes on); after a restart the next call decodes on the new engine. The scheduler's engine
    thread is the only caller, but for ``accepts`` and ``cost``, which hold no state."""

    def __init__(self, worker: EngineWorker) -> None:
        self.worker = worker
        self._generation = worker.generation
        self._batch = LiveBatch(worker.engine)

    def _current(self) -> LiveBatch:
        """The live batch of the current engine (a fresh one once the engine was rebuilt)."""
        if self._generation != self.worker.generation:
            self.reset()
        return self._batch

    @property
    def bytes_per_position(self) -> int:
        return self._current().bytes_per_position()

    @property
    def rows(self) -> int:
        return self._current().rows

    @staticmethod
    def accepts(options: Any, streaming: bool = False) -> bool:
        """Whether a sentence decodes live: the engine's search chooser says (engine/chooser.py decodes_live)."""
        return decodes_live(options, streaming)

    def cost(self, options: TranslateOptions, source: Source) -> tuple[int, int]:
        """(decoder rows, cache positions it may reach) of one sentence: its beam size and its length limit."""
        engine = self.worker.engine
        limit = length_limits([source.length], engine.max_source_tokens, options.max_length)[0]  # type: ignore[union-attr]
        return options.beam_size, limit

    def join(self, items: list[tuple[Hashable, TranslateOptions, Source, bool]]) -> tuple[list[tuple[Any, Any]], float]:
        """(key, options, source, stream) join at the next step; returns those answered at once and encode seconds."""
        sentences = [(key, source.ids, options, stream) for key, options, source, stream in items]
        return self._supervised(lambda: self._current().add(sentences))

    def leave(self, key: Hashable) -> bool:
        return self._current().remove(key)

    def step(self) -> StepOutput:
        return self._supervised(lambda: self._current().step())

    def reset(self) -> None:
        """Drop everything live (after a failed step the state is not trusted)."""
        self._generation, self._batch = self.worker.generation, LiveBatch(self.worker.engine)

    def _supervised(self, call: Callable[[], Any]) -> Any:
        generation = self.worker.generation
        try:
            return call()
        except Exception as exc:
            self.worker.check(generation, exc)
            raise
