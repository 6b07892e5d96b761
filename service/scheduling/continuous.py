"""Continuous (iteration-level) batching (MT_SCHEDULER=continuous): one live decode per model on its own engine
thread.

The event loop queues sentences, fails requests at their deadline and withdraws them when their client goes away;
the engine thread, in a loop: frees the rows of sentences taken out since the last step, asks ``next_work`` whether
a decoder step or a whole batch of other work comes next, admits waiting translations (``admit``: oldest first,
within the row and cache budgets, no fixed wait) and runs one step for every live row, or runs the batch. Each
sentence leaves the step it finishes; results, streamed tokens and failures go back to the event loop. Engine
workers (MT_ENGINE_WORKERS) do not apply: steps and batches take turns on the one engine thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BatchLimits, LiveLimits, LiveLoad, Queued, admit, fair_order, next_work
from service.scheduling.errors import EngineRestarted
from service.scheduling.queue import Observer, RequestQueue
from service.scheduling.runners import BatchRunner, LiveRunner
from service.scheduling.scheduler import Scheduler
from service.scheduling.tickets import Ticket, deadline_exceeded


def continuous_scheduler(
    model: str,
    runner: BatchRunner,
    limits: BatchLimits,
    metrics: Metrics,
    live: LiveRunner,
    live_limits: LiveLimits,
    observe: Observer | None = None,
) -> Scheduler:
    # one engine thread, whatever MT_ENGINE_WORKERS says
    queue = RequestQueue(model, limits, metrics, workers=1, observe=observe)
    return Scheduler(queue, ContinuousDriver(queue, runner, live, live_limits))


def streaming(q: Queued) -> bool:
    """Whether the sentence's request streams its tokens (its ticket has a listener)."""
    return getattr(q.ticket, "listener", None) is not None


class ContinuousDriver:
    mode = "continuous"

    def __init__(self, queue: RequestQueue, runner: BatchRunner, live: LiveRunner, live_limits: LiveLimits) -> None:
        self.queue, self.runner, self.live, self.live_limits = queue, runner, live, live_limits
        self._removals: list[Queued] = []  # live sentences taken out (deadline, disconnect) since the last step
        self._live: dict[Queued, None] = {}  # the sentences decoding now (an ordered set), under queue.cond
        self._last = "batch"
        self._last_joined: str | None = None  # the client of the last sentence that joined the decode (fair turns)
        self._thread: threading.Thread | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Future | None = None
        # the per-step series, labelled once (every step updates them)
        model, metrics = queue.model, queue.metrics
        self._step_rows = metrics.step_rows.labels(model)
        self._step_seconds = metrics.inference.labels(model, "step")
        self._live_rows = metrics.live_rows.labels(model)
        self._generated = metrics.generated_tokens.labels(model)

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._event_loop = asyncio.get_running_loop()
        self._stopped = self._event_loop.create_future()
        self._thread = threading.Thread(target=self._engine_thread, name=f"engine-{self.queue.model}", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Wait until the engine thread has finished what was accepted (decoding and streams included)."""
        if self._stopped is not None:
            await self._stopped

    # --- the event loop's side ---------------------------------------------------------------
    def put(self, items: list[Queued]) -> None:
        for q in items:
            if self._live_work(q):
                q.rows, q.positions = self.live.cost(q.key, q.payload)
        self.queue.put(items)

    def _live_work(self, q: Queued) -> bool:
        """Whether a waiting sentence decodes live (the runner decides by its work key and whether it streams)."""
        return self.live.accepts(q.key, streaming(q))

    def deadline_passed(self, ticket: Ticket) -> None:
        """The deadline came: the request's waiting sentences are dropped and its live ones leave the decode at
        the next step (504 now). Whole batches of other work that already run are finished and answered."""
        if ticket.future.done():
            return
        with self.queue.cond:
            decoding = any(q.ticket is ticket for q in self._live)
            waiting = any(q.ticket is ticket for q in self.queue.items)
        if ticket.started and not (decoding or waiting):
            return
        self.withdraw(ticket, "deadline")
        ticket.fail(deadline_exceeded(decoding))

    def withdraw(self, ticket: Ticket, reason: str) -> None:
        """Drop the request's waiting sentences and take its live ones out of the decode (at the next step)."""
        with self.queue.cond:
            removed = self.queue.remove(ticket)
            live = [q for q in self._live if q.ticket is ticket]
            for q in live:
                del self._live[q]
            if live:
                self._removals.extend(live)
                self.queue.cond.notify()
        if removed or live:
            self.queue.metrics.dropped.labels(self.queue.model, reason).inc()
        if live:
            self.queue.metrics.freed_rows.labels(self.queue.model, reason).inc(sum(q.rows for q in live))

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the event loop is closed (process exit): nobody waits any more
            self._event_loop.call_soon_threadsafe(callback, *args)  # type: ignore[union-attr]

    # --- the engine thread -------------------------------------------------------------------
    def _engine_thread(self) -> None:
        try:
            while True:
                work = self._next()
                if work is None:
                    return
                action, chosen, removals = work
                for q in removals:
                    self.live.leave(q)
                if removals:
                    self._live_rows.set(self.live.rows)
                if action == "step":
                    self._step(chosen)
                elif action == "batch":
                    self._batch(chosen)
                if action != "idle":
                    self._last = action
        finally:
            self._post(lambda: self._stopped.done() or self._stopped.set_result(None))  # type: ignore[union-attr]

    def _next(self) -> tuple[str, list[Queued], list[Queued]] | None:
        """Under the lock: wait for work, choose it and take it off the queue; None once closed and done."""
        queue = self.queue
        with queue.cond:
            if self._live and not queue.items and not self._removals:  # the usual decode step: nothing to decide
                return "step", [], []
            while True:
                removals, self._removals = self._removals, []
                decode_waiting = other_waiting = False
                for q in queue.items:
                    if self._live_work(q):
                        decode_waiting = True
                    else:
                        other_waiting = True
                    if decode_waiting and other_waiting:
                        break
                action = next_work(bool(self._live), decode_waiting, other_waiting, self._last)
                if action != "idle" or removals:
                    break
                if queue.closing:
                    return None
                queue.cond.wait()
            chosen: list[Queued] = []
            if action == "step":
                waiting = fair_order([q for q in queue.items if self._live_work(q)], self._last_joined)
                load = LiveLoad(sum(q.rows for q in self._live), max((q.positions for q in self._live), default=0))
                chosen = admit(waiting, load, self.live_limits, self.live.bytes_per_position)
                self._live.update(dict.fromkeys(chosen))
                if chosen:
                    self._last_joined = chosen[-1].client
            elif action == "batch":
                chosen = queue.fair_batch([q for q in queue.items if not self._live_work(q)])
            queue.take(chosen)
        return action, chosen, removals

    def _step(self, joining: list[Queued]) -> None:
        """Newcomers join (encoder), one decoder step runs for every live row; the outcome goes to the loop."""
        step_id = self.queue.next_batch_id()
        started = time.monotonic()
        metrics, m = self.queue.metrics, self.queue.model
        try:
            done, encode_s = ([], 0.0)
            if joining:
                items = [(q, q.key, q.payload, streaming(q)) for q in joining]
                done, encode_s = self.live.join(items)
            out = self.live.step()
        except Exception as exc:
            self._fail_live(joining, step_id, "decoder step", exc)
            return
        now = time.monotonic()
        if joining:
            answered_at_once = {id(q) for q, _ in done}
            for q in joining:
                if id(q) not in answered_at_once:
                    metrics.time_to_first_token.labels(m).observe(now - q.ticket.enqueued)
        finished = [*done, *out.finished]
        if finished:
            with self.queue.cond:
                for q, _ in finished:
                    self._live.pop(q, None)
        failed = getattr(out, "failed", None)  # sentences a dead worker process took with it (not sent again)
        if failed:
            self._fail_alone([q for q, _ in failed], step_id, failed[0][1])
        if joining:
            metrics.inference.labels(m, "encode").observe(encode_s)
        if out.rows:
            self._step_rows.observe(out.rows)
            self._step_seconds.observe(out.seconds)
            if self.queue.observe is not None:  # one execution: newcomers' encoder and the step for every live row
                self.queue.observe(None, out.rows, now - started)
        if joining or finished:  # the live rows change only then
            self._live_rows.set(self.live.rows)
        if out.generated_tokens:
            self._generated.inc(out.generated_tokens)
        if out.finished:
            self.queue.learn((now - started) / len(out.finished))
        if finished or out.progress or joining:
            self._post(self._step_done, joining, finished, out.progress, step_id)

    def _fail_live(self, held: list[Queued], step_id: int, what: str, exc: Exception) -> None:
        """A failed step, or an engine that died: every live sentence and ``held`` fail; the decode starts empty."""
        with self.queue.cond:
            failed = [*self._live, *held]
            self._live.clear()
        self.queue.log_failure(failed, step_id, what)
        self.live.reset()
        self._live_rows.set(0)
        self._post(self.queue.fail, list(dict.fromkeys(failed)), step_id, what, exc, self.withdraw)

    def _fail_alone(self, failed: list[Queued], step_id: int, exc: Exception) -> None:
        """Live sentences that failed while the others go on (their worker process died: remote_live.py)."""
        with self.queue.cond:
            for q in failed:
                self._live.pop(q, None)
        self._post(self.queue.fail, list(dict.fromkeys(failed)), step_id, "decoder step", exc, self.withdraw)

    @staticmethod
    def _step_done(joined: list[Queued], finished: list, progress: dict, step_id: int) -> None:
        """On the event loop: the access log's batch ids, streamed tokens, finished sentences."""
        for q in joined:
            q.ticket.ran_in(step_id)
        for q, tokens in progress.items():
            q.ticket.progress(q.index, tokens)
        for q, result in finished:
            q.ticket.deliver(q.index, result)

    def _batch(self, batch: list[Queued]) -> None:
        """One whole batch of other work (embeddings, attention) on the engine thread."""
        batch_id = self.queue.next_batch_id()
        started = time.monotonic()
        try:
            results, stats = self.queue.run(self.runner, batch[0].key, [q.payload for q in batch])
        except Exception as exc:
            if isinstance(exc, EngineRestarted):  # the live decode died with the engine
                self._fail_live(batch, batch_id, "batch", exc)
            else:
                self.queue.log_failure(batch, batch_id, "batch")
                self._post(self.queue.fail, batch, batch_id, "batch", exc, self.withdraw)
            return
        self._post(self.queue.finish, batch, results, stats, batch_id, time.monotonic() - started)
