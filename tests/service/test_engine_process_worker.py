"""ProcessEngineWorker (service/execution/remote.py) without HTTP, on the shipped de-en model: its batches answer as the
same engine in this process does; a worker process killed while it holds a batch is replaced and the batch answered
by the new one (counted with its cause); a worker that cannot build its engine fails its start with the reason; a
closed worker ends its process and refuses calls; how a process ended is named for the metric."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.bundle import load_bundle, versions_of
from engine.decoding import TranslateOptions
from service.execution.channel import exit_cause
from service.execution.engine_build import EngineSpec, build_engine
from service.execution.remote import ProcessEngineWorker
from service.execution.work import Source, engine_runner
from service.observability.metrics import Metrics
from service.scheduling.errors import EngineRestarted

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
SPEC = EngineSpec(providers="cpu", fused_step="false")
TEXTS = ["Ein Hund rennt durch den Park.", "Zwei Kinder spielen am Strand."]


@pytest.fixture(scope="module")
def bundle():
    return load_bundle(REPOSITORY / "de-en" / versions_of(REPOSITORY, "de-en")[-1])


@pytest.fixture
def worker(bundle):
    worker = ProcessEngineWorker("de-en", bundle, SPEC, Metrics())
    worker.start()
    yield worker
    worker.close()


def _batch(worker) -> tuple[TranslateOptions, list[Source]]:
    options = worker.engine.resolved(TranslateOptions.request())
    return options, [Source(ids) for ids in worker.engine.source_ids(TEXTS)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_batches_answer_as_the_engine_in_this_process(worker, bundle):
    options, sources = _batch(worker)
    remote, stats = worker.run_batch(options, sources)
    local, _ = engine_runner(build_engine(bundle, SPEC))(options, sources)
    assert [t.token_ids for t in remote] == [t.token_ids for t in local]
    assert [t.score for t in remote] == pytest.approx([t.score for t in local], abs=1e-6)
    assert stats["generated_tokens"] > 0
    assert worker.engine.max_source_tokens == bundle.model_config["max_positions"]


def test_a_killed_worker_is_replaced_and_its_batch_answered_by_the_new_one(worker):
    options, sources = _batch(worker)
    expected = [t.token_ids for t in worker.run_batch(options, sources)[0]]
    first = worker.pid
    os.kill(first, signal.SIGSTOP)
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(worker.run_batch, options, sources)
        time.sleep(0.3)
        os.kill(first, signal.SIGKILL)
        results, _ = held.result(timeout=60)
    assert [t.token_ids for t in results] == expected
    assert worker.pid != first and worker.generation == 1 and not worker.restarting and worker.retried == 1
    restarts = worker.metrics.registry.get_sample_value(
        "mt_engine_restarts_total", {"model": "de-en", "cause": "SIGKILL"}
    )
    assert restarts == 1


def test_a_closed_worker_ends_its_process_and_refuses_calls(bundle):
    worker = ProcessEngineWorker("de-en", bundle, SPEC, Metrics())
    worker.start()
    pid = worker.pid
    worker.close()
    assert not _alive(pid)
    options, sources = _batch(worker)
    with pytest.raises(EngineRestarted):
        worker.run_batch(options, sources)


def test_a_worker_that_cannot_build_its_engine_fails_its_start(bundle):
    worker = ProcessEngineWorker("de-en", bundle, EngineSpec(providers="cpu", variant="int4"), Metrics())
    with pytest.raises(Exception, match="int4"):
        worker.start()


def test_how_a_process_ended_is_named():
    assert exit_cause(-signal.SIGSEGV) == "SIGSEGV"
    assert exit_cause(-signal.SIGKILL) == "SIGKILL"
    assert exit_cause(3) == "exit_3"
    assert exit_cause(None) == "unknown"


def test_the_live_decode_in_the_worker_process_keeps_our_keys_and_lets_sentences_leave(bundle):
    worker = ProcessEngineWorker("de-en", bundle, SPEC, Metrics(), live=True)
    worker.start()
    try:
        live = worker.live
        options = worker.engine.resolved(TranslateOptions.request(beam_size=1, no_repeat_ngram_size=0))
        staying, leaving = object(), object()  # the scheduler's keys: compared by identity, never sent
        sources = [Source(ids) for ids in worker.engine.source_ids(TEXTS)]
        done, _ = live.join([(staying, options, sources[0], True), (leaving, options, sources[1], False)])
        assert done == [] and live.rows == 2
        assert live.leave(leaving) and live.rows == 1 and not live.leave(leaving)
        finished, streamed = [], []
        for _ in range(200):
            out = live.step()
            streamed += [tokens for key, tokens in out.progress.items() if key is staying]
            finished += out.finished
            if finished:
                break
        [(key, translation)] = finished
        assert key is staying and live.rows == 0 and not live.holding
        assert [t for tokens in streamed for t in tokens] == translation.token_ids[: sum(map(len, streamed))]
        assert translation.token_ids  # a real translation came back
    finally:
        worker.close()


def test_live_sentences_of_a_dead_worker_join_the_new_one_unless_they_stream(bundle):
    worker = ProcessEngineWorker("de-en", bundle, SPEC, Metrics(), live=True)
    worker.start()
    try:
        live = worker.live
        options = worker.engine.resolved(TranslateOptions.request(beam_size=1, no_repeat_ngram_size=0))
        plain, streamed = object(), object()
        sources = [Source(ids) for ids in worker.engine.source_ids(TEXTS)]
        expected = [t.token_ids for t in worker.run_batch(options, sources[:1])[0]]
        live.join([(plain, options, sources[0], False), (streamed, options, sources[1], True)])
        first = worker.pid
        os.kill(first, signal.SIGSTOP)
        with ThreadPoolExecutor(1) as pool:
            step = pool.submit(live.step)
            time.sleep(0.3)
            os.kill(first, signal.SIGKILL)
            out = step.result(timeout=60)
        [(key, error)] = out.failed
        assert key is streamed and isinstance(error, EngineRestarted) and error.retry_after >= 1
        assert worker.pid != first and live.rows == 1 and live.holding
        finished = list(out.finished)
        for _ in range(200):
            if finished:
                break
            finished += live.step().finished
        [(key, translation)] = finished
        assert key is plain and translation.token_ids == expected[0]
        retried = worker.metrics.registry.get_sample_value("mt_engine_retried_batches_total", {"model": "de-en"})
        assert retried == 1
    finally:
        worker.close()


def test_signals_meant_for_the_server_do_not_end_the_worker_process(worker):
    """Ctrl-C, a hang-up or SIGTERM sent to the whole process group: the server drains, its worker serves on."""
    options, sources = _batch(worker)
    pid = worker.pid
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        os.kill(pid, sig)
    time.sleep(0.3)
    assert worker.pid == pid and _alive(pid) and worker.generation == 0
    assert worker.run_batch(options, sources)[0]
