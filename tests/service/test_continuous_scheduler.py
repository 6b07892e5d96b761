"""The continuous scheduler with a fake live decode (no HTTP, no ONNX): admission at every step, deadlines and
disconnects mid-decode, whole batches of other work taking turns with steps, failures, shutdown, listeners."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import pytest

from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BatchLimits, LiveLimits, Queued
from service.scheduling.continuous import continuous_scheduler
from service.scheduling.dynamic import dynamic_scheduler
from service.scheduling.errors import BatchFailed, DeadlineExceeded, EngineRestarted, ShuttingDown

MODEL = "m"


@dataclass(frozen=True)
class Decode:
    """A translation key: its beam size is the rows a sentence takes."""

    beam: int = 1


EMBED = "embed"  # any key the live runner does not accept runs as whole batches


@dataclass
class StepOut:
    finished: list = field(default_factory=list)
    progress: dict = field(default_factory=dict)
    rows: int = 0
    seconds: float = 0.0
    generated_tokens: int = 0


class FakeLive:
    """Each payload {"text", "steps"} decodes for ``steps`` steps, one token (its step number) per step, then
    answers (key, text). Every join, step, leave and batch is recorded in ``events``; ``hold`` stops the next
    step until ``gate`` opens; a payload with text "fail" makes its first step raise."""

    bytes_per_position = 1

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.live: dict = {}  # key -> [payload, steps done, stream]
        self.gate = threading.Event()
        self.gate.set()
        self.stepping = threading.Event()

    def accepts(self, key, streaming) -> bool:
        return isinstance(key, Decode)

    def cost(self, key, payload) -> tuple[int, int]:
        return key.beam, payload["steps"] + 1

    def join(self, items):
        self.events.append(("join", [p["text"] for _, _, p, _ in items]))
        for q, _key, payload, stream in items:
            self.live[q] = [payload, 0, stream]
        return [], 0.001

    def leave(self, q) -> bool:
        self.events.append(("leave", self.live[q][0]["text"] if q in self.live else None))
        return self.live.pop(q, None) is not None

    def step(self):
        self.stepping.set()
        assert self.gate.wait(10), "test gate never opened"
        out = StepOut(rows=self.rows)
        self.events.append(("step", sorted(p["text"] for p, _, _ in self.live.values())))
        if any(p["text"] == "fail" for p, _, _ in self.live.values()):
            raise RuntimeError("fake step failure")
        for q, entry in list(self.live.items()):
            entry[1] += 1
            payload, done, stream = entry
            if stream:
                out.progress[q] = [done]
            if done >= payload["steps"]:
                out.finished.append((q, (q.key, payload["text"])))
                del self.live[q]
        return out

    def reset(self) -> None:
        self.live.clear()

    @property
    def rows(self) -> int:
        return sum(q.key.beam for q in self.live)

    def run_batch(self, key, payloads):
        self.events.append(("batch", [p["text"] for p in payloads]))
        return [(key, p["text"]) for p in payloads], {"encode": 0.001}

    def steps(self) -> list[list[str]]:
        return [e[1] for e in self.events if e[0] == "step"]


def make(live: FakeLive, max_rows: int = 64, max_cache_bytes: int = 1 << 30, **limits):
    metrics = Metrics()
    limits.setdefault("max_wait_s", 0.0)
    scheduler = continuous_scheduler(
        MODEL, live.run_batch, BatchLimits(**limits), metrics, live, LiveLimits(max_rows, max_cache_bytes)
    )
    scheduler.start()
    return scheduler, metrics


def sample(metrics: Metrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, {"model": MODEL, **labels}) or 0.0


async def translate(scheduler, texts, steps, beam=1, timeout=30.0, listener=None):
    payloads = [{"text": t, "steps": n} for t, n in zip(texts, steps, strict=True)]
    return await scheduler.submit(Decode(beam), payloads, [5] * len(texts), timeout, listener=listener)


async def until(predicate, what: str) -> None:
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"never happened: {what}")


def test_sentences_join_the_running_decode_at_the_next_step_and_leave_the_step_they_finish():
    async def scenario():
        live = FakeLive()
        scheduler, metrics = make(live)
        live.gate.clear()
        first = asyncio.ensure_future(translate(scheduler, ["a", "b"], [5, 2]))
        await asyncio.to_thread(live.stepping.wait, 10)  # step 1 of a, b runs (held)
        second = asyncio.ensure_future(translate(scheduler, ["c"], [2]))
        await until(lambda: len(scheduler.queue) == 1, "c queued")
        live.gate.set()
        answers = await asyncio.gather(first, second)
        await scheduler.stop()
        return live, metrics, answers

    live, metrics, (first, second) = asyncio.run(scenario())
    assert first == [(Decode(), "a"), (Decode(), "b")] and second == [(Decode(), "c")]
    steps = live.steps()
    assert steps[0] == ["a", "b"] and steps[1] == ["a", "b", "c"]  # c joined at the step after it arrived
    assert steps[2] == ["a", "c"]  # b finished at step 2 and left; a goes on
    assert len(steps) == 5
    assert sample(metrics, "mt_decoder_step_rows_count") == 5
    assert sample(metrics, "mt_decoder_step_rows_sum") == 2 + 3 + 2 + 1 + 1
    assert sample(metrics, "mt_time_to_first_token_seconds_count") == 3
    assert sample(metrics, "mt_live_rows") == 0


def test_admission_keeps_the_row_budget_oldest_first_and_a_big_beam_is_not_starved():
    async def scenario():
        live = FakeLive()
        scheduler, _ = make(live, max_rows=4)
        live.gate.clear()
        running = asyncio.ensure_future(translate(scheduler, ["g1", "g2"], [3, 3]))
        await asyncio.to_thread(live.stepping.wait, 10)
        beam = asyncio.ensure_future(translate(scheduler, ["beam4"], [1], beam=4))
        await until(lambda: len(scheduler.queue) == 1, "beam queued")
        shorts = [asyncio.ensure_future(translate(scheduler, [f"s{i}"], [1])) for i in range(4)]
        await until(lambda: len(scheduler.queue) == 5, "shorts queued")
        live.gate.set()
        await asyncio.gather(running, beam, *shorts)
        await scheduler.stop()
        return live

    live = asyncio.run(scenario())
    joins = [e[1] for e in live.events if e[0] == "join"]
    assert joins[0] == ["g1", "g2"]
    assert joins[1] == ["beam4"]  # it waited for g1, g2 to leave; the greedy ones behind it did not overtake
    assert all(len(step) <= 4 or "beam4" not in step for step in live.steps())
    for step in live.steps():
        assert sum(4 if t == "beam4" else 1 for t in step) <= 4


def test_a_deadline_mid_decode_answers_504_and_frees_its_rows_while_others_go_on():
    async def scenario():
        live = FakeLive()
        scheduler, metrics = make(live)
        slow = asyncio.ensure_future(translate(scheduler, ["slow"], [10**6], beam=3, timeout=0.05))
        other = asyncio.ensure_future(translate(scheduler, ["other"], [30]))
        with pytest.raises(DeadlineExceeded, match="while it was being decoded"):
            await slow
        answer = await other
        await until(lambda: ("leave", "slow") in live.events, "the slow sentence left")
        await scheduler.stop()
        return live, metrics, answer

    live, metrics, answer = asyncio.run(scenario())
    assert answer == [(Decode(), "other")]
    assert sample(metrics, "mt_dropped_requests_total", reason="deadline") == 1
    assert sample(metrics, "mt_freed_rows_total", reason="deadline") == 3
    left = live.events.index(("leave", "slow"))
    assert all("slow" not in e[1] for e in live.events[left:] if e[0] == "step")


def test_a_client_that_goes_away_frees_its_rows_at_the_next_step():
    async def scenario():
        live = FakeLive()
        scheduler, metrics = make(live)
        gone = asyncio.ensure_future(translate(scheduler, ["gone1", "gone2"], [10**6, 10**6]))
        stays = asyncio.ensure_future(translate(scheduler, ["stays"], [20]))
        await until(lambda: len(live.steps()) >= 3, "decoding")
        gone.cancel()
        answer = await stays
        await until(lambda: not live.live, "nothing live")
        await scheduler.stop()
        return live, metrics, answer

    live, metrics, answer = asyncio.run(scenario())
    assert answer == [(Decode(), "stays")]
    assert ("leave", "gone1") in live.events and ("leave", "gone2") in live.events
    assert sample(metrics, "mt_dropped_requests_total", reason="client_disconnected") == 1
    assert sample(metrics, "mt_freed_rows_total", reason="client_disconnected") == 2


def test_whole_batches_of_other_work_take_turns_with_decoder_steps():
    async def scenario():
        live = FakeLive()
        scheduler, _ = make(live, max_sentences=2)
        decode = asyncio.ensure_future(translate(scheduler, ["d"], [6]))
        await until(lambda: len(live.steps()) >= 1, "decoding")
        payloads = [{"text": f"e{i}", "steps": 0} for i in range(6)]
        embed = asyncio.ensure_future(scheduler.submit(EMBED, payloads, [3] * 6, 30.0))
        answers = await asyncio.gather(decode, embed)
        await scheduler.stop()
        return live, answers

    live, (decode, embed) = asyncio.run(scenario())
    assert decode == [(Decode(), "d")] and embed == [(EMBED, f"e{i}") for i in range(6)]
    kinds = [e[0] for e in live.events if e[0] in ("step", "batch")]
    batches = [i for i, k in enumerate(kinds) if k == "batch"]
    assert len(batches) == 3  # 6 sentences in batches of 2
    for i in batches:  # never two batches in a row while the decode has work: a step comes between
        if i + 1 < len(kinds) and kinds[i + 1] == "batch":
            assert "step" not in kinds[i + 1 :]


def test_a_failed_step_fails_the_live_requests_and_the_decode_goes_on_for_new_ones():
    async def scenario():
        live = FakeLive()
        scheduler, _ = make(live)
        bad = asyncio.ensure_future(translate(scheduler, ["fail", "x"], [3, 3]))
        with pytest.raises(BatchFailed, match="decoder step"):
            await bad
        after = await translate(scheduler, ["y"], [2])
        await scheduler.stop()
        return after

    assert asyncio.run(scenario()) == [(Decode(), "y")]


def test_an_engine_restarted_during_a_whole_batch_fails_every_live_sentence_and_waiting_work_runs_after():
    class RestartingLive(FakeLive):
        def run_batch(self, key, payloads):
            if any(p["text"] == "crash" for p in payloads):
                raise EngineRestarted(3)  # the engine died in this batch and was rebuilt (service/execution/worker.py)
            return super().run_batch(key, payloads)

    async def scenario():
        live = RestartingLive()
        scheduler, metrics = make(live)
        decoding = asyncio.ensure_future(translate(scheduler, ["a", "b"], [10**6, 10**6], beam=2))
        await until(lambda: len(live.steps()) >= 1, "decoding")
        crash = asyncio.ensure_future(scheduler.submit(EMBED, [{"text": "crash", "steps": 0}], [3], 30.0))
        outcomes = await asyncio.wait_for(asyncio.gather(decoding, crash, return_exceptions=True), 30)
        after = await translate(scheduler, ["c"], [2])
        await scheduler.stop()
        return outcomes, after, metrics

    (decoding, crash), after, metrics = asyncio.run(scenario())
    assert isinstance(decoding, EngineRestarted) and isinstance(crash, EngineRestarted)
    assert decoding.retry_after == 3
    assert after == [(Decode(), "c")]
    assert sample(metrics, "mt_live_rows") == 0


def test_listeners_hear_streamed_tokens_and_each_result_as_it_comes():
    class Recorder:
        def __init__(self) -> None:
            self.events: list = []

        def progress(self, index, tokens):
            self.events.append(("progress", index, tokens))

        def result(self, index, result):
            self.events.append(("result", index, result))

    async def scenario():
        live = FakeLive()
        scheduler, _ = make(live)
        recorder = Recorder()
        answer = await translate(scheduler, ["p", "q"], [3, 1], listener=recorder)
        await scheduler.stop()
        return recorder.events, answer

    events, answer = asyncio.run(scenario())
    assert answer == [(Decode(), "p"), (Decode(), "q")]
    assert events.index(("result", 1, (Decode(), "q"))) < events.index(("progress", 0, [2]))  # q first
    assert [e[2] for e in events if e[0] == "progress" and e[1] == 0] == [[1], [2], [3]]


def test_stop_finishes_accepted_decoding_and_refuses_new_work():
    async def scenario():
        live = FakeLive()
        scheduler, _ = make(live)
        accepted = asyncio.ensure_future(translate(scheduler, ["a", "b"], [40, 10]))
        await until(lambda: len(live.steps()) >= 2, "decoding")
        stopping = asyncio.ensure_future(scheduler.stop())
        await asyncio.sleep(0)
        with pytest.raises(ShuttingDown):
            await translate(scheduler, ["late"], [1])
        answer = await accepted
        await stopping
        return answer

    assert asyncio.run(scenario()) == [(Decode(), "a"), (Decode(), "b")]


def test_the_real_engine_under_concurrent_mixed_requests_gives_every_sentence_its_alone_answer(tiny_bundle_dir):
    """The scheduler over the tiny bundle's live decode: requests of every kind of search arrive while others
    decode; each answer equals the engine's whole-batch answer for that text alone."""
    import random

    from tiny_bundle import SAMPLE_SENTENCES, WORD_MAP

    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions
    from service.execution.work import EmbedOptions, Source
    from service.execution.worker import EngineWorker

    engine = Engine(load_bundle(tiny_bundle_dir), variant="int8", providers="cpu")
    rng = random.Random(3)
    words = sorted(WORD_MAP)
    texts = SAMPLE_SENTENCES + [" ".join(rng.choice(words) for _ in range(rng.randint(1, 14))) for _ in range(20)]
    kinds = [
        TranslateOptions(),
        TranslateOptions(beam_size=4),
        TranslateOptions(beam_size=4, num_hypotheses=3),
        TranslateOptions(beam_size=2, max_length=3, length_penalty=1.0),
    ]
    requests = [(kinds[i % len(kinds)], texts[i : i + 1 + i % 3]) for i in range(len(texts))]

    async def scenario():
        metrics = Metrics()
        worker = EngineWorker(MODEL, lambda: engine, metrics, live=True)
        worker.start()
        assert worker.live is not None
        scheduler = continuous_scheduler(
            MODEL, worker.run_batch, BatchLimits(max_sentences=8), metrics, worker.live, LiveLimits(max_rows=16)
        )
        scheduler.start()

        async def one(options, batch, delay):
            await asyncio.sleep(delay)
            sources = [Source(ids) for ids in engine.source_ids(batch)]
            return await scheduler.submit(options, sources, [s.length for s in sources], 60.0)

        tasks = [one(o, b, 0.003 * i) for i, (o, b) in enumerate(requests)]
        all_sources = [Source(ids) for ids in engine.source_ids(texts)]
        embeds = scheduler.submit(EmbedOptions(), all_sources, [3] * len(texts), 60.0)
        answers = await asyncio.gather(*tasks, embeds)
        await scheduler.stop()
        return answers, metrics

    answers, metrics = asyncio.run(scenario())
    for (options, batch), got in zip(requests, answers[:-1], strict=True):
        for text, translation in zip(batch, got, strict=True):
            alone = engine.translate([text], options)[0]
            assert translation.token_ids == alone.token_ids, (text, options)
            assert [h[2] for h in translation.hypotheses] == [h[2] for h in alone.hypotheses]
            # a float32 sum of log-probabilities: its last bits follow the batch shape the encoder ran in where its
            # kernels are not batch-invariant (an AVX2-only EPYC: 1.2e-5 on a score of -24.5, 5e-7 of it)
            assert translation.score == pytest.approx(alone.score, rel=1e-6, abs=1e-5)
    assert len(answers[-1]) == len(texts)
    assert sample(metrics, "mt_decoder_step_rows_count") > 0
    assert metrics.registry.get_sample_value("mt_decoder_step_rows_bucket", {"model": MODEL, "le": "16.0"}) == (
        sample(metrics, "mt_decoder_step_rows_count")
    )  # the row budget held at every step


def test_a_full_queue_retry_after_counts_one_engine_thread_whatever_the_engine_workers():
    """MT_ENGINE_WORKERS batches run at once with dynamic batching and share the queue's wait; the continuous
    scheduler's one engine thread does not (nothing is started: the queue stays as filled)."""
    live, limits = FakeLive(), BatchLimits(max_queue=4, workers=4)
    continuous = continuous_scheduler(MODEL, live.run_batch, limits, Metrics(), live, LiveLimits())
    dynamic = dynamic_scheduler(MODEL, live.run_batch, limits, Metrics())
    for scheduler in (continuous, dynamic):
        scheduler.queue.put([Queued(Decode(), 5, 0.0) for _ in range(4)])
        scheduler.queue.seconds_per_sentence = 1.0
    assert continuous.refusal(1).retry_after == 4
    assert dynamic.refusal(1).retry_after == 1
