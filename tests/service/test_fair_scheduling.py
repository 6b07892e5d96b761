"""Per-key fairness in both schedulers, with fake engines (no HTTP, no ONNX): a flooding client's backlog does not
sit ahead of another client's work, and each client's share of the queue is enforced with its own message."""

from __future__ import annotations

import asyncio

import pytest
from test_continuous_scheduler import Decode, FakeLive
from test_continuous_scheduler import make as make_continuous
from test_scheduler import KEY_A, FakeRunner, hold_worker, payloads, until_queued
from test_scheduler import make as make_dynamic

from service.scheduling.errors import KeyQueueFull, QueueFull, RequestTooLarge


async def send(scheduler, texts: list[str], client: str, length: int = 5, key=KEY_A):
    return await scheduler.submit(key, payloads(texts), [length] * len(texts), 30.0, client=client)


def rejections(metrics, key: str, reason: str) -> float:
    return metrics.registry.get_sample_value("mt_key_rejections_total", {"key": key, "reason": reason}) or 0.0


def test_dynamic_batches_take_the_clients_in_turn():
    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make_dynamic(runner, max_sentences=2)
        blocker = await hold_worker(scheduler, runner)
        flood = [asyncio.ensure_future(send(scheduler, [f"f{i}"], "flood")) for i in range(10)]
        await until_queued(scheduler, 10)
        quiet = asyncio.ensure_future(send(scheduler, ["q"], "quiet", length=40))  # no flood sentence is near it
        await until_queued(scheduler, 11)
        runner.gate.set()
        answers = await asyncio.gather(quiet, *flood)
        await blocker
        await scheduler.stop()
        return runner, answers

    runner, answers = asyncio.run(scenario())
    assert answers[0] == [(KEY_A, "q")]
    batches = runner.texts()
    assert batches[0] == ["blocker"]
    quiet_batch = next(i for i, texts in enumerate(batches) if "q" in texts)
    assert quiet_batch <= 2, batches  # first in line after one flood batch; oldest-first would put it 6th
    assert sum(len(texts) for texts in batches) == 12  # every sentence ran once


def test_each_client_has_its_share_of_the_queue_and_is_told_its_own_limit():
    async def scenario():
        runner = FakeRunner()
        scheduler, metrics = make_dynamic(runner, max_queue=8, max_queue_per_client=4)
        blocker = await hold_worker(scheduler, runner)
        held = [asyncio.ensure_future(send(scheduler, ["f1", "f2", "f3", "f4"], "flood"))]
        await until_queued(scheduler, 4)
        with pytest.raises(KeyQueueFull) as over_share:
            await send(scheduler, ["f5"], "flood")
        with pytest.raises(RequestTooLarge) as too_large:
            await send(scheduler, ["a", "b", "c", "d", "e"], "quiet")
        held.append(asyncio.ensure_future(send(scheduler, ["q1", "q2", "q3", "q4"], "quiet")))  # room for it
        await until_queued(scheduler, 8)
        with pytest.raises(QueueFull) as whole_queue:
            await send(scheduler, ["x"], "third")
        runner.gate.set()
        answers = await asyncio.gather(*held)
        await blocker
        await scheduler.stop()
        return over_share.value, too_large.value, whole_queue.value, answers, metrics

    over_share, too_large, whole_queue, answers, metrics = asyncio.run(scenario())
    assert "API key flood has 4 of its 4 queued sentences" in str(over_share)
    assert "MT_KEY_QUEUE_SHARE" in str(over_share) and over_share.retry_after >= 1
    assert "an API key (quiet) may queue at most 4 sentences" in str(too_large)
    assert not isinstance(whole_queue, KeyQueueFull) and "8 of 8" in str(whole_queue)
    assert [len(a) for a in answers] == [4, 4]
    assert rejections(metrics, "flood", "key_queue_full") == 1
    assert rejections(metrics, "third", "queue_full") == 1


def test_without_a_client_there_is_no_share_and_the_order_is_oldest_first():
    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make_dynamic(runner, max_sentences=1, max_queue=8, max_queue_per_client=2)
        blocker = await hold_worker(scheduler, runner)
        tasks = [asyncio.ensure_future(send(scheduler, [f"t{i}", f"u{i}"], "")) for i in range(3)]
        await until_queued(scheduler, 6)  # 6 sentences: more than the share, accepted (no client)
        runner.gate.set()
        await asyncio.gather(*tasks)
        await blocker
        await scheduler.stop()
        return runner

    assert runner_texts(asyncio.run(scenario())) == ["blocker", "t0", "u0", "t1", "u1", "t2", "u2"]


def runner_texts(runner: FakeRunner) -> list[str]:
    return [t for texts in runner.texts() for t in texts]


async def one_step(scheduler, texts: list[str], client: str):
    """Translations that decode for one step each."""
    payloads = [{"text": t, "steps": 1} for t in texts]
    return await scheduler.submit(Decode(), payloads, [5] * len(texts), 30.0, client=client)


def test_continuous_admission_takes_the_clients_in_turn():
    async def scenario():
        live = FakeLive()
        scheduler, _ = make_continuous(live, max_rows=2)
        live.gate.clear()
        running = asyncio.ensure_future(one_step(scheduler, ["f0", "f1"], "flood"))
        await asyncio.to_thread(live.stepping.wait, 10)  # f0, f1 fill both rows; their step is held
        backlog = [asyncio.ensure_future(one_step(scheduler, [f"f{i}"], "flood")) for i in range(2, 10)]
        await asyncio.sleep(0)
        quiet = asyncio.ensure_future(one_step(scheduler, ["q"], "quiet"))
        for _ in range(2000):
            if len(scheduler.queue) == 9:
                break
            await asyncio.sleep(0.002)
        live.gate.set()
        await asyncio.gather(running, quiet, *backlog)
        await scheduler.stop()
        return live

    live = asyncio.run(scenario())
    joins = [e[1] for e in live.events if e[0] == "join"]
    assert joins[0] == ["f0", "f1"]
    assert "q" in joins[1], joins  # it joined as soon as rows freed, ahead of the 8 older flood sentences
    assert sorted(t for j in joins for t in j) == sorted(["q", *(f"f{i}" for i in range(10))])


def test_background_work_waits_for_interactive_sentences_and_never_shares_their_batch():
    """A document job's sentences (priority BACKGROUND) queued first: a short request that arrives later runs in
    the next batch, alone, and the background sentences all run afterwards."""
    from service.scheduling.batch_policy import BACKGROUND

    async def scenario():
        runner = FakeRunner()
        scheduler, _ = make_dynamic(runner, max_sentences=4)
        blocker = await hold_worker(scheduler, runner)
        document = asyncio.ensure_future(
            scheduler.submit(KEY_A, payloads([f"d{i}" for i in range(12)]), [5] * 12, 30.0, priority=BACKGROUND)
        )
        await until_queued(scheduler, 12)
        short = asyncio.ensure_future(send(scheduler, ["s"], ""))
        await until_queued(scheduler, 13)
        runner.gate.set()
        answers = await asyncio.gather(short, document)
        await blocker
        await scheduler.stop()
        return runner, answers

    runner, answers = asyncio.run(scenario())
    assert answers[0] == [(KEY_A, "s")] and len(answers[1]) == 12
    batches = runner.texts()
    assert batches[:2] == [["blocker"], ["s"]], batches  # oldest-first would put it behind three document batches
    assert sum(len(texts) for texts in batches) == 14
