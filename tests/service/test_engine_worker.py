"""The supervised engine worker with fake engines (no ONNX): a failure the probe does not confirm stays the batch's
own; a dead engine is rebuilt once, the work it held fails with EngineRestarted, waiting work runs on the new engine;
an engine that cannot be rebuilt is fatal; the live decode follows the rebuilt engine."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import service.execution.worker as worker_module
from service.execution.worker import EngineWorker
from service.observability.metrics import Metrics
from service.scheduling.errors import EngineRestarted

MODEL = "m"


class FakeEngine:
    """Translates when alive; once ``dead`` every call raises (as sessions on a failed device do)."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.dead = False
        self.step_decoder = self.live_step = None  # no live decode unless a test provides one

    def translate(self, texts, options):
        if self.dead:
            raise RuntimeError(f"engine {self.number} is dead")
        return [f"{t} (engine {self.number})" for t in texts]


class Builds:
    """The worker's ``build``: engine 0, 1, ...; ``gate`` holds a rebuild; ``fail_from`` makes builds fail."""

    def __init__(self) -> None:
        self.engines: list[FakeEngine] = []
        self.gate = threading.Event()
        self.gate.set()
        self.rebuilding = threading.Event()
        self.fail_from: int | None = None

    def __call__(self) -> FakeEngine:
        n = len(self.engines)
        if n:
            self.rebuilding.set()
            assert self.gate.wait(10), "test gate never opened"
        if self.fail_from is not None and n >= self.fail_from:
            raise RuntimeError("cannot create sessions")
        self.engines.append(FakeEngine(n))
        return self.engines[-1]


class Hold:
    """A payload whose batch waits, once running, until ``release`` is set."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()


def wrap(runner, engine: FakeEngine):
    """Batches of payloads: 'crash' kills the engine, 'bad' fails alone, a Hold waits for its release."""

    def run_batch(key, payloads):
        for p in payloads:
            if p == "crash":
                engine.dead = True
                raise RuntimeError("injected crash")
            if p == "bad":
                raise ValueError("this batch alone")
            if isinstance(p, Hold):
                p.entered.set()
                p.release.wait(10)
        return engine.translate([str(p) for p in payloads], None), {}

    return run_batch


def make(builds: Builds, **kwargs) -> tuple[EngineWorker, Metrics]:
    metrics = Metrics()
    worker = EngineWorker(MODEL, builds, metrics, wrap, **kwargs)
    worker.start()
    return worker, metrics


def restarts(metrics: Metrics) -> float:
    labels = {"model": MODEL, "cause": "probe_failed"}
    return metrics.registry.get_sample_value("mt_engine_restarts_total", labels) or 0.0


def test_a_failure_that_the_probe_does_not_confirm_fails_only_its_batch():
    builds = Builds()
    worker, metrics = make(builds)
    with pytest.raises(ValueError, match="this batch alone"):
        worker.run_batch("k", ["bad"])
    assert worker.run_batch("k", ["ok"])[0] == ["ok (engine 0)"]
    assert restarts(metrics) == 0 and len(builds.engines) == 1 and not worker.restarting


def test_a_dead_engine_is_rebuilt_and_the_batch_it_held_fails_with_engine_restarted():
    builds = Builds()
    worker, metrics = make(builds)
    with pytest.raises(EngineRestarted) as failure:
        worker.run_batch("k", ["crash"])
    assert isinstance(failure.value.__cause__, RuntimeError)  # the engine's own exception, for the log
    assert failure.value.retry_after >= 1
    assert restarts(metrics) == 1 and len(builds.engines) == 2 and worker.generation == 1
    assert worker.engine is builds.engines[1] and not worker.restarting
    assert worker.run_batch("k", ["later"])[0] == ["later (engine 1)"]


def test_work_on_the_dead_engine_fails_once_and_work_that_waited_runs_on_the_new_one():
    builds = Builds()
    worker, metrics = make(builds)
    held = Hold()
    builds.gate.clear()  # the rebuild waits until the test has looked at the worker meanwhile
    with ThreadPoolExecutor(3) as pool:
        on_dead_engine = pool.submit(worker.run_batch, "k", [held])  # running when the engine dies
        assert held.entered.wait(10)
        crash = pool.submit(worker.run_batch, "k", ["crash"])
        assert builds.rebuilding.wait(10)
        assert worker.restarting  # /readyz answers 503 now
        waiting = pool.submit(worker.run_batch, "k", ["queued"])  # starts while the engine is rebuilt
        held.release.set()  # the held batch now runs into the dead engine
        builds.gate.set()
        with pytest.raises(EngineRestarted):
            crash.result(10)
        with pytest.raises(EngineRestarted):
            on_dead_engine.result(10)
        assert waiting.result(10)[0] == ["queued (engine 1)"]
    assert restarts(metrics) == 1 and len(builds.engines) == 2 and not worker.restarting


def test_an_engine_that_cannot_be_rebuilt_is_fatal(monkeypatch):
    monkeypatch.setattr(worker_module, "RESTART_BACKOFF_S", 0.0)
    builds = Builds()
    fatal: list[str] = []
    worker, metrics = make(builds, on_fatal=fatal.append)
    builds.fail_from = 1
    with pytest.raises(EngineRestarted):
        worker.run_batch("k", ["crash"])
    assert fatal == [worker.failed] and "could not be restarted (3 attempts)" in fatal[0]
    assert worker.restarting  # never ready again: the process exits (service/__main__.py)
    assert restarts(metrics) == 1


class FakeLive:
    """A live batch on one engine (engine/live.py LiveBatch): ``step`` translates nothing, and raises once
    its engine is dead."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine

    @staticmethod
    def bytes_per_position() -> int:
        return 8

    def step(self):
        if self.engine.dead:
            raise RuntimeError("step on a dead engine")
        return f"step on engine {self.engine.number}"


def live_on_fakes(monkeypatch, live_batch: type = FakeLive) -> None:
    """The worker's live decode over ``live_batch`` instead of LiveBatch (the fake engines have no step graph)."""
    monkeypatch.setattr(worker_module, "supports_live", lambda engine: True)
    monkeypatch.setattr(worker_module, "LiveBatch", live_batch)


def test_the_live_decode_follows_the_rebuilt_engine(monkeypatch):
    live_on_fakes(monkeypatch)
    builds = Builds()
    worker, metrics = make(builds, live=True)
    live = worker.live
    assert live is not None and live.step() == "step on engine 0"
    builds.engines[0].dead = True
    with pytest.raises(EngineRestarted):
        live.step()
    assert live.step() == "step on engine 1" and live.bytes_per_position == 8
    assert restarts(metrics) == 1


def test_a_failed_step_on_a_working_engine_is_not_a_restart(monkeypatch):
    class FailingOnce(FakeLive):
        def step(self):
            raise RuntimeError("this step alone")

    live_on_fakes(monkeypatch, FailingOnce)
    builds = Builds()
    worker, metrics = make(builds, live=True)
    with pytest.raises(RuntimeError, match="this step alone"):
        worker.live.step()
    assert restarts(metrics) == 0 and len(builds.engines) == 1


def test_what_decodes_live():
    """Plain translations decode live; constrained ones and other work never; with the repeated-n-gram block only a
    streaming request (whole batches search a lone blocked sentence faster: worker.py)."""
    from engine.decoding import TranslateOptions
    from service.execution.worker import SupervisedLive

    plain, blocked = TranslateOptions(), TranslateOptions(no_repeat_ngram_size=4)
    assert SupervisedLive.accepts(plain, False) and SupervisedLive.accepts(plain, True)
    assert not SupervisedLive.accepts(blocked, False) and SupervisedLive.accepts(blocked, True)
    assert not SupervisedLive.accepts(TranslateOptions(constrained=True), True)
    assert not SupervisedLive.accepts("embed", True)
