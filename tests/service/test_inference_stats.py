"""The inference statistics (service/observability/inference_stats.py) and the scheduler's hooks that feed them: a
request's queue
wait and engine time measured by the dynamic scheduler with a slow fake engine, one execution per engine batch."""

from __future__ import annotations

import asyncio
import threading
import time

from service.observability.inference_stats import InferenceStatistics, RequestTiming
from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BatchLimits, LiveLimits
from service.scheduling.continuous import continuous_scheduler
from service.scheduling.dynamic import dynamic_scheduler

ENGINE_S = 0.05


def slow_runner(key, payloads: list) -> tuple[list, dict]:
    time.sleep(ENGINE_S)
    return [p for p in payloads], {}


def test_the_scheduler_measures_queue_and_engine_time_and_reports_executions():
    executions: list[tuple[object, int, float]] = []
    lock = threading.Lock()

    def observe(key, size: int, seconds: float) -> None:
        with lock:
            executions.append((key, size, seconds))

    async def run() -> tuple[RequestTiming, RequestTiming]:
        limits = BatchLimits(max_sentences=2, max_tokens=1000, max_wait_s=0.0, max_queue=100, workers=1)
        scheduler = dynamic_scheduler("m", slow_runner, limits, Metrics(), observe)
        scheduler.start()
        first, second = RequestTiming(), RequestTiming()
        # the first request's two sentences fill the one worker; the second request waits for that batch
        a = asyncio.create_task(scheduler.submit("k", ["a", "b"], [1, 1], 10.0, timing=first))
        await asyncio.sleep(0.01)
        b = asyncio.create_task(scheduler.submit("k", ["c"], [1], 10.0, timing=second))
        assert await a == ["a", "b"] and await b == ["c"]
        await scheduler.stop()
        return first, second

    first, second = asyncio.run(run())
    assert first.queue_s < ENGINE_S / 2 and ENGINE_S * 0.9 <= first.infer_s < ENGINE_S * 4
    assert second.queue_s >= ENGINE_S * 0.7 and ENGINE_S * 0.9 <= second.infer_s < ENGINE_S * 4
    assert [(key, size) for key, size, _ in executions] == [("k", 2), ("k", 1)]
    assert all(seconds >= ENGINE_S * 0.9 for _, _, seconds in executions)


def test_statistics_in_tritons_shape():
    stats = InferenceStatistics()
    timing = RequestTiming(queue_s=0.001, input_s=0.002, infer_s=0.003)
    stats.request("de-en", "translate", "1", True, 0.010, timing, inferences=3)
    stats.request("de-en", "translate", "1", False, 0.5, RequestTiming(), inferences=1)
    stats.execution("de-en", "translate", "1", 3, 0.003)
    stats.execution("de-en", "translate", "1", 3, 0.001)
    stats.execution("de-en", "embed", "1", 1, 0.004)
    entry = stats.snapshot("de-en", "translate", "1", "de-en")
    assert entry["name"] == "de-en" and entry["version"] == "1" and entry["last_inference"] > 0
    assert entry["inference_count"] == 3 and entry["execution_count"] == 2
    inference = entry["inference_stats"]
    assert inference["success"] == {"count": 1, "ns": 10_000_000}
    assert inference["fail"] == {"count": 1, "ns": 500_000_000}
    assert inference["queue"] == {"count": 1, "ns": 1_000_000}
    assert inference["compute_input"] == {"count": 1, "ns": 2_000_000}
    assert inference["compute_infer"] == {"count": 1, "ns": 3_000_000}
    assert inference["compute_output"] == {"count": 1, "ns": 4_000_000}  # what remains of the 10 ms
    [batch] = entry["batch_stats"]
    assert batch["batch_size"] == 3 and batch["compute_infer"] == {"count": 2, "ns": 4_000_000}
    unseen = stats.snapshot("de-en", "embed", "2", "de-en-embed")
    assert unseen["inference_count"] == 0 and unseen["inference_stats"]["success"] == {"count": 0, "ns": 0}


def test_continuous_batching_reports_each_decoder_step_as_an_execution_of_its_live_rows():
    from test_continuous_scheduler import Decode, FakeLive  # the continuous scheduler's fake live decode

    executions: list[tuple[object, int]] = []

    async def run() -> RequestTiming:
        live = FakeLive()
        limits = BatchLimits(max_wait_s=0.0)
        observe = lambda key, size, seconds: executions.append((key, size))  # noqa: E731
        scheduler = continuous_scheduler("m", live.run_batch, limits, Metrics(), live, LiveLimits(64, 1 << 30), observe)
        scheduler.start()
        timing = RequestTiming()
        payloads = [{"text": "a", "steps": 3}, {"text": "b", "steps": 2}]
        assert await scheduler.submit(Decode(1), payloads, [5, 5], 10.0, timing=timing) == [
            (Decode(1), "a"),
            (Decode(1), "b"),
        ]
        await scheduler.stop()
        return timing

    timing = asyncio.run(run())
    assert executions == [(None, 2), (None, 2), (None, 1)]  # b leaves after the step it finishes
    assert timing.infer_s > 0 and timing.queue_s >= 0
