"""The dynamic batcher with a fake engine (no HTTP, no ONNX): batching, limits, deadlines, failures, shutdown.

A gate in the fake runner holds the single worker busy, so what queues up meanwhile is known exactly when
the next batch is taken: batch composition is asserted without depending on timing.
"""

from __future__ import annotations

import asyncio
import random
import threading

import pytest

from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BatchLimits
from service.scheduling.dynamic import dynamic_scheduler
from service.scheduling.errors import (
    BatchFailed,
    DeadlineExceeded,
    EngineRestarted,
    QueueFull,
    RequestTooLarge,
    ShuttingDown,
)
from service.scheduling.scheduler import Scheduler

MODEL = "m"
KEY_A = ("translate", 4)
KEY_B = ("translate", 1)


class FakeRunner:
    """Echoes each payload with the key it ran under; records every batch; can hold or fail a batch."""

    def __init__(self, fail_on: str | None = None, jitter: bool = False) -> None:
        self.batches: list[tuple[str, object, list]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_on = fail_on
        self.jitter = jitter
        self._lock = threading.Lock()

    def hold(self) -> None:
        self.gate.clear()
        self.entered.clear()

    def __call__(self, key, payloads: list) -> tuple[list, dict]:
        with self._lock:
            self.batches.append((key, list(payloads)))
        self.entered.set()
        assert self.gate.wait(10), "test gate never opened"
        if self.jitter:
            threading.Event().wait(random.random() * 0.003)
        if self.fail_on is not None and any(p["text"] == self.fail_on for p in payloads):
            raise RuntimeError("fake engine failure")
        results = [(key, p["text"]) for p in payloads]
        return results, {"encode": 0.001, "decode": 0.002, "generated_tokens": 3 * len(payloads)}

    def texts(self) -> list[list[str]]:
        return [[p["text"] for p in payloads] for _, payloads in self.batches]


def make(runner: FakeRunner, **limits) -> tuple[Scheduler, Metrics]:
    metrics = Metrics()
    limits.setdefault("max_wait_s", 0.001)
    scheduler = dynamic_scheduler(MODEL, runner, BatchLimits(**limits), metrics)
    scheduler.start()
    return scheduler, metrics


def payloads(texts: list[str]) -> list[dict]:
    return [{"text": t} for t in texts]


async def submit(scheduler: Scheduler, texts: list[str], key=KEY_A, lengths: list[int] | None = None, timeout=30.0):
    lengths = lengths or [len(t) for t in texts]
    return await scheduler.submit(key, payloads(texts), lengths, timeout)


async def hold_worker(scheduler: Scheduler, runner: FakeRunner) -> asyncio.Task:
    """Occupy the only worker with a one-sentence 'blocker' batch that waits for runner.gate."""
    runner.hold()
    task = asyncio.ensure_future(submit(scheduler, ["blocker"]))
    assert await asyncio.to_thread(runner.entered.wait, 10), "blocker batch never started"
    return task


async def until_queued(scheduler: Scheduler, n: int) -> None:
    for _ in range(1000):
        if len(scheduler.queue) >= n:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"expected {n} queued sentences, have {len(scheduler.queue)}")


def sample(metrics: Metrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, {"model": MODEL, **labels}) or 0.0


def test_waiting_requests_are_merged_into_one_batch_and_answers_keep_their_order():
    async def scenario():
        runner = FakeRunner()
        scheduler, metrics = make(runner, max_sentences=32)
        blocker = await hold_worker(scheduler, runner)
        requests = [["a1", "a2", "a3"], ["b1"], ["c1", "c2"], ["d1", "d2", "d3", "d4"]]
        tasks = [asyncio.ensure_future(submit(scheduler, texts)) for texts in requests]
        await until_queued(scheduler, 10)
        runner.gate.set()
        answers = await asyncio.gather(*tasks)
        await blocker
        await scheduler.stop()
        return runner, metrics, requests, answers

    runner, metrics, requests, answers = asyncio.run(scenario())
    for texts, answer in zip(requests, answers, strict=True):
        assert answer == [(KEY_A, t) for t in texts]
    assert len(runner.batches) == 2
    assert sorted(runner.texts()[1]) == sorted(t for texts in requests for t in texts)
    assert sample(metrics, "mt_batch_size_count") == 2
    assert sample(metrics, "mt_batch_size_sum") == 11
    assert sample(metrics, "mt_queue_wait_seconds_count") == 5  # once per request
    assert sample(metrics, "mt_generated_tokens_total") == 33
    assert sample(metrics, "mt_inference_duration_seconds_count", stage="encode") == 2
    assert sample(metrics, "mt_inference_duration_seconds_count", stage="decode") == 2
    assert sample(metrics, "mt_queue_depth") == 0


def test_requests_with_different_options_never_share_a_batch():
    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make(runner)
        blocker = await hold_worker(scheduler, runner)
        a = asyncio.ensure_future(submit(scheduler, ["a1", "a2"], key=KEY_A))
        b = asyncio.ensure_future(submit(scheduler, ["b1", "b2"], key=KEY_B))
        a2 = asyncio.ensure_future(submit(scheduler, ["a3"], key=KEY_A))
        await until_queued(scheduler, 5)
        runner.gate.set()
        answers = await asyncio.gather(a, b, a2)
        await blocker
        await scheduler.stop()
        return runner, answers

    runner, (a, b, a2) = asyncio.run(scenario())
    assert a == [(KEY_A, "a1"), (KEY_A, "a2")]
    assert b == [(KEY_B, "b1"), (KEY_B, "b2")]
    assert a2 == [(KEY_A, "a3")]
    for key, batch in runner.batches[1:]:
        assert all(p["text"][0] == ("b" if key == KEY_B else "a") for p in batch), runner.batches
    assert sorted(map(sorted, runner.texts()[1:])) == [["a1", "a2", "a3"], ["b1", "b2"]]


def test_batches_respect_sentence_and_padded_token_limits():
    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make(runner, max_sentences=4, max_tokens=40)
        blocker = await hold_worker(scheduler, runner)
        texts = [f"s{i:02d}" for i in range(10)]
        lengths = [3, 12, 5, 9, 20, 2, 7, 11, 4, 6]
        task = asyncio.ensure_future(submit(scheduler, texts, lengths=lengths))
        await until_queued(scheduler, 10)
        runner.gate.set()
        answer = await task
        await blocker
        await scheduler.stop()
        return runner, texts, dict(zip(texts, lengths, strict=True)), answer

    runner, texts, length_of, answer = asyncio.run(scenario())
    assert answer == [(KEY_A, t) for t in texts]  # split over several batches, reassembled in order
    batches = runner.texts()[1:]
    assert sorted(t for batch in batches for t in batch) == texts
    assert len(batches) >= 3
    for batch in batches:
        assert len(batch) <= 4
        assert max(length_of[t] for t in batch) * len(batch) <= 40


def test_batch_is_built_around_the_oldest_sentence_from_its_nearest_lengths():
    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make(runner, max_sentences=3)
        blocker = await hold_worker(scheduler, runner)
        old = asyncio.ensure_future(submit(scheduler, ["old"], lengths=[10]))
        await until_queued(scheduler, 1)
        others = ["n1", "n2", "n9", "n11", "n30", "n40"]
        rest = asyncio.ensure_future(submit(scheduler, others, lengths=[1, 2, 9, 11, 30, 40]))
        await until_queued(scheduler, 7)
        runner.gate.set()
        await asyncio.gather(old, rest, blocker)
        await scheduler.stop()
        return runner

    runner = asyncio.run(scenario())
    assert sorted(runner.texts()[1]) == ["n11", "n9", "old"]


def test_an_old_long_sentence_is_not_starved_by_a_stream_of_short_ones():
    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make(runner, max_sentences=4)
        blocker = await hold_worker(scheduler, runner)
        long = asyncio.ensure_future(submit(scheduler, ["long"], lengths=[60]))
        await until_queued(scheduler, 1)
        shorts = [asyncio.ensure_future(submit(scheduler, [f"short{i}"], lengths=[2])) for i in range(12)]
        await until_queued(scheduler, 13)
        runner.gate.set()
        await asyncio.gather(long, blocker, *shorts)
        await scheduler.stop()
        return runner

    runner = asyncio.run(scenario())
    assert "long" in runner.texts()[1]


def test_one_sentence_per_batch_when_batching_is_off():
    async def scenario():
        runner = FakeRunner()
        scheduler, metrics = make(runner, max_sentences=1)
        blocker = await hold_worker(scheduler, runner)
        tasks = [asyncio.ensure_future(submit(scheduler, [f"x{i}", f"y{i}"])) for i in range(4)]
        await until_queued(scheduler, 8)
        runner.gate.set()
        answers = await asyncio.gather(*tasks)
        await blocker
        await scheduler.stop()
        return runner, metrics, answers

    runner, metrics, answers = asyncio.run(scenario())
    assert answers == [[(KEY_A, f"x{i}"), (KEY_A, f"y{i}")] for i in range(4)]
    assert [len(b) for b in runner.texts()] == [1] * 9
    assert sample(metrics, "mt_batch_size_count") == sample(metrics, "mt_batch_size_sum") == 9


def test_full_queue_refuses_with_retry_after_and_keeps_what_it_accepted():
    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make(runner, max_queue=3)
        blocker = await hold_worker(scheduler, runner)
        accepted = asyncio.ensure_future(submit(scheduler, ["q1", "q2", "q3"]))
        await until_queued(scheduler, 3)
        with pytest.raises(QueueFull) as refused:
            await submit(scheduler, ["q4"])
        depth = len(scheduler.queue)
        runner.gate.set()
        answer = await accepted
        await blocker
        after = await submit(scheduler, ["q5"])  # room again
        await scheduler.stop()
        return refused.value, depth, answer, after

    refused, depth, answer, after = asyncio.run(scenario())
    assert isinstance(refused, QueueFull)
    assert refused.retry_after >= 1
    assert "3 of 3" in str(refused)
    assert depth == 3
    assert answer == [(KEY_A, "q1"), (KEY_A, "q2"), (KEY_A, "q3")]
    assert after == [(KEY_A, "q5")]


def test_a_request_larger_than_the_queue_is_refused_for_good_not_asked_to_retry():
    """More sentences than the queue ever holds: 413 at once (a 429 would send the client into endless retries),
    even with an empty queue; requests that fit are still served."""

    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make(runner, max_queue=3)
        with pytest.raises(RequestTooLarge) as refused:
            await submit(scheduler, ["a", "b", "c", "d"])
        fits = await submit(scheduler, ["a", "b", "c"])
        await scheduler.stop()
        return refused.value, fits

    refused, fits = asyncio.run(scenario())
    assert isinstance(refused, RequestTooLarge) and not isinstance(refused, QueueFull)
    assert "4 texts" in str(refused) and "at most 3 sentences" in str(refused)
    assert fits == [(KEY_A, "a"), (KEY_A, "b"), (KEY_A, "c")]


class MiscountingRunner(FakeRunner):
    """Returns one result too few for batches that contain "short"."""

    def __call__(self, key, payloads: list) -> tuple[list, dict]:
        results, stats = super().__call__(key, payloads)
        return (results[:-1] if any(p["text"] == "short" for p in payloads) else results), stats


def test_a_wrong_number_of_engine_results_fails_the_batch_instead_of_hanging():
    async def scenario():
        runner = MiscountingRunner()
        scheduler, _ = make(runner)
        with pytest.raises(BatchFailed):
            await asyncio.wait_for(submit(scheduler, ["short", "x"]), 10)  # a hang fails here, not forever
        later = await submit(scheduler, ["later"])
        await scheduler.stop()
        return later

    assert asyncio.run(scenario()) == [(KEY_A, "later")]


def test_deadline_passing_in_the_queue_fails_the_request_without_engine_work():
    async def scenario():
        runner = FakeRunner()
        scheduler, metrics = make(runner)
        blocker = await hold_worker(scheduler, runner)
        late = asyncio.ensure_future(submit(scheduler, ["late"], timeout=0.01))
        patient = asyncio.ensure_future(submit(scheduler, ["patient"], timeout=30))
        await until_queued(scheduler, 1)  # "late" may leave the queue at its deadline already
        await asyncio.sleep(0.05)  # the 10 ms deadline has certainly passed; the worker is still held
        runner.gate.set()
        with pytest.raises(DeadlineExceeded):
            await late
        answer = await patient
        await blocker
        await scheduler.stop()
        return runner, metrics, answer

    runner, metrics, answer = asyncio.run(scenario())
    assert answer == [(KEY_A, "patient")]
    assert "late" not in [t for batch in runner.texts() for t in batch]
    assert sample(metrics, "mt_dropped_requests_total", reason="deadline") == 1


def test_engine_failure_fails_its_batch_only_and_the_scheduler_keeps_serving():
    async def scenario():
        runner = FakeRunner(fail_on="boom")
        scheduler, _ = make(runner)
        blocker = await hold_worker(scheduler, runner)
        bad = asyncio.ensure_future(submit(scheduler, ["boom", "fine"], key=KEY_A))
        other = asyncio.ensure_future(submit(scheduler, ["other"], key=KEY_B))
        await until_queued(scheduler, 3)
        runner.gate.set()
        with pytest.raises(BatchFailed):
            await bad
        answer = await other
        await blocker
        later = await submit(scheduler, ["later"])
        await scheduler.stop()
        return answer, later, len(scheduler.queue)

    answer, later, depth = asyncio.run(scenario())
    assert answer == [(KEY_B, "other")]
    assert later == [(KEY_A, "later")]
    assert depth == 0


def test_work_held_by_an_engine_that_was_restarted_fails_with_engine_restarted_not_batch_failed():
    def runner(key, payloads):
        if any(p["text"] == "held" for p in payloads):
            raise EngineRestarted(4)  # what service/execution/worker.py raises for work a dead engine held
        return [(key, p["text"]) for p in payloads], {}

    async def scenario():
        scheduler, _ = make(runner)
        with pytest.raises(EngineRestarted) as failure:
            await submit(scheduler, ["held"])
        later = await submit(scheduler, ["later"])
        await scheduler.stop()
        return failure.value, later

    failure, later = asyncio.run(scenario())
    assert failure.retry_after == 4 and later == [(KEY_A, "later")]


def test_cancelled_request_is_dropped_before_engine_work():
    async def scenario():
        runner = FakeRunner()
        scheduler, metrics = make(runner)
        blocker = await hold_worker(scheduler, runner)
        gone = asyncio.ensure_future(submit(scheduler, ["gone1", "gone2"]))
        stays = asyncio.ensure_future(submit(scheduler, ["stays"]))
        await until_queued(scheduler, 3)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        depth = len(scheduler.queue)
        runner.gate.set()
        answer = await stays
        await blocker
        await scheduler.stop()
        return runner, metrics, depth, answer

    runner, metrics, depth, answer = asyncio.run(scenario())
    assert depth == 1
    assert answer == [(KEY_A, "stays")]
    assert not {"gone1", "gone2"} & {t for batch in runner.texts() for t in batch}
    assert sample(metrics, "mt_dropped_requests_total", reason="client_disconnected") == 1


def test_stop_finishes_accepted_work_then_refuses_new_work():
    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make(runner, max_sentences=2)
        blocker = await hold_worker(scheduler, runner)
        accepted = [asyncio.ensure_future(submit(scheduler, [f"w{i}"])) for i in range(5)]
        await until_queued(scheduler, 5)
        stopping = asyncio.ensure_future(scheduler.stop())
        await asyncio.sleep(0)
        with pytest.raises(ShuttingDown):
            await submit(scheduler, ["too late"])
        runner.gate.set()
        answers = await asyncio.gather(*accepted)
        await blocker
        await stopping
        return answers

    answers = asyncio.run(scenario())
    assert answers == [[(KEY_A, f"w{i}")] for i in range(5)]


def test_parallel_workers_never_mix_answers_between_requests():
    async def scenario():
        runner = FakeRunner(jitter=True)
        scheduler, _ = make(runner, max_sentences=5, workers=2)
        rng = random.Random(7)
        requests = [[f"r{i}-{j}" for j in range(rng.randint(1, 4))] for i in range(40)]
        keys = [KEY_A if rng.random() < 0.5 else KEY_B for _ in requests]
        answers = await asyncio.gather(
            *(submit(scheduler, texts, key=key) for texts, key in zip(requests, keys, strict=True))
        )
        await scheduler.stop()
        return requests, keys, answers

    requests, keys, answers = asyncio.run(scenario())
    for texts, key, answer in zip(requests, keys, answers, strict=True):
        assert answer == [(key, t) for t in texts]
