"""Batching between the serving layer and the engine: the asyncio plumbing around ``batch_policy``.

Requests are split into sentences; sentences with equal keys (the work's frozen options) are merged into
engine batches that ``service/batch_policy.py`` chooses and times. The engine runs in worker threads, off the
event loop; each result goes back to its own request slot. The queue is bounded (QueueFull) and a request whose
deadline passes before its work starts fails with DeadlineExceeded and costs no engine work. Nothing here
knows HTTP: the API maps these exceptions to status codes (service/api/errors.py).

``Scheduler`` is dynamic batching (MT_SCHEDULER=dynamic, or off: one sentence per batch): a batch is formed once
and decoded to its end. ``ContinuousScheduler`` (MT_SCHEDULER=continuous) keeps one live decode per model on its
own engine thread: before every decoder step waiting translations join it (``batch_policy.admit``), each sentence
leaves the step it finishes, a request whose deadline passes or whose client goes away mid-decode frees its rows at
the next step; embedding and attention work still runs as whole batches, alternating with the steps
(``batch_policy.next_work``). A request can have a listener that hears each sentence's streamed tokens and
result as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from service.batch_policy import (
    BatchLimits,
    LiveLimits,
    LiveLoad,
    Queued,
    admit,
    fair_order,
    next_work,
    retry_after,
    select_batch,
    wait_before_dispatch,
)
from service.keys import key_retry_after
from service.metrics import Metrics
from service.scheduling.errors import (
    BatchFailed,
    DeadlineExceeded,
    EngineRestarted,
    KeyQueueFull,
    QueueFull,
    RequestTooLarge,
    ShuttingDown,
)

log = logging.getLogger(__name__)

# run_batch(key, payloads) -> (one result per payload, stats {"encode": s, "decode": s, "generated_tokens": n})
BatchRunner = Callable[[Hashable, list[Any]], tuple[list[Any], dict[str, float]]]


class Listener(Protocol):
    """Hears a request's sentences as they progress (called on the event loop)."""

    def progress(self, index: int, tokens: list[int]) -> None:
        """Tokens of sentence ``index`` that became final (streaming; continuous batching only)."""

    def result(self, index: int, result: Any) -> None:
        """Sentence ``index`` is done."""


class LiveRunner(Protocol):
    """A live decode on one engine (service/work.py LiveRunner): what the continuous scheduler drives."""

    bytes_per_position: int

    def accepts(self, key: Hashable) -> bool: ...

    def cost(self, key: Hashable, payload: Any) -> tuple[int, int]: ...

    def join(self, items: list[tuple[Hashable, Hashable, Any, bool]]) -> tuple[list[tuple[Any, Any]], float]: ...

    def leave(self, key: Hashable) -> bool: ...

    def step(self) -> Any: ...

    def reset(self) -> None: ...

    @property
    def rows(self) -> int: ...


@dataclass(eq=False)
class Request:
    key: Hashable
    n_items: int
    deadline: float
    future: asyncio.Future
    enqueued: float = field(default_factory=time.monotonic)
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    started: bool = False
    cancelled: bool = False
    request_id: str = ""
    batch_ids: list[int] = field(default_factory=list)
    listener: Listener | None = None

    def fail(self, exc: Exception) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class Scheduler:
    def __init__(self, model: str, runner: BatchRunner, limits: BatchLimits, metrics: Metrics) -> None:
        self.model, self.runner, self.limits, self.metrics = model, runner, limits, metrics
        self.queue: list[Queued] = []
        self._wakeup = asyncio.Event()
        self._workers = asyncio.Semaphore(limits.workers)
        self._executor = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix=f"engine-{model}")
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        self._closing = False
        self._batch_ids = itertools.count(1)
        self._seconds_per_sentence = 0.05  # running estimate, for Retry-After
        self._last_client: str | None = None  # the client whose sentence anchored the last batch (fair turns)
        self._queue_depth = metrics.queue_depth.labels(model)  # labelled once: every queue change sets it

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"scheduler-{self.model}")

    async def stop(self) -> None:
        """Refuse new work, finish what was accepted, then stop the loop and the worker threads."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        self._executor.shutdown(wait=True)

    # --- submission --------------------------------------------------------------------------
    async def submit(
        self,
        key: Hashable,
        payloads: Sequence[Any],
        lengths: Sequence[int],
        timeout_s: float,
        request_id: str = "",
        batch_ids: list[int] | None = None,
        listener: Listener | None = None,
        client: str = "",
    ) -> list[Any]:
        """Queue one request's sentences and wait for their results (in order).

        ``batch_ids``, when given, receives the id of every engine batch that ran (or failed) this request's
        work (for the access log). At the deadline, work that has not started is dropped (504). ``listener``, when
        given, hears each sentence's result as it comes (and its streamed tokens, with continuous batching).
        ``client`` (an API key's label) is whose work it is: each client has its share of the queue, and clients
        are served in turn.
        """
        if self._closing:
            raise ShuttingDown("the service is shutting down; retry on another instance")
        if len(payloads) > self.limits.max_queue:
            raise RequestTooLarge(len(payloads), self.limits.max_queue)
        if client and self.limits.max_queue_per_client and len(payloads) > self.limits.max_queue_per_client:
            raise RequestTooLarge(len(payloads), self.limits.max_queue_per_client, client)
        refusal = self.refusal(len(payloads), client)
        if refusal is not None:
            if client:
                reason = "key_queue_full" if isinstance(refusal, KeyQueueFull) else "queue_full"
                self.metrics.key_rejections.labels(client, reason).inc()
            raise refusal
        loop = asyncio.get_running_loop()
        request = Request(key, len(payloads), time.monotonic() + timeout_s, loop.create_future(), request_id=request_id)
        if batch_ids is not None:
            request.batch_ids = batch_ids
        request.listener = listener
        request.results = [None] * len(payloads)
        request.remaining = len(payloads)
        pairs = enumerate(zip(payloads, lengths, strict=True))
        self._enqueue([Queued(key, n, request.enqueued, request, i, p, client=client) for i, (p, n) in pairs])
        timer = loop.call_later(timeout_s, self._deadline_passed, request)
        try:
            return await request.future
        except asyncio.CancelledError:
            self.cancel(request)
            raise
        finally:
            timer.cancel()

    def _enqueue(self, items: list[Queued]) -> None:
        self.queue.extend(items)
        self._queue_depth.set(len(self.queue))
        self._wakeup.set()

    def refusal(self, n_items: int = 1, client: str = "") -> QueueFull | None:
        """The QueueFull a request of ``n_items`` sentences would get now (Retry-After estimated from the queue
        depth and the measured seconds per sentence), or None when it fits: KeyQueueFull when ``client``'s share
        of the queue is full, else QueueFull when the whole queue is."""
        cap = self.limits.max_queue_per_client
        if client and cap:
            queue = self.queue  # one snapshot: the continuous engine thread replaces the list, never edits it in place
            mine = sum(1 for q in queue if q.client == client)
            active = len({q.client for q in queue} | {client})
            wait = key_retry_after(mine, n_items, cap, active, self._seconds_per_sentence, self.limits.workers)
            if wait is not None:
                return KeyQueueFull(wait, client, mine, cap)
        depth = len(self.queue)
        retry = retry_after(depth, n_items, self.limits, self._seconds_per_sentence)
        return None if retry is None else QueueFull(retry, depth, self.limits.max_queue)

    def _deadline_passed(self, request: Request) -> None:
        """The deadline came while the request still waited (e.g. behind a long max_wait): fail it now."""
        if request.started or request.future.done():
            return  # started work is finished and answered
        self._remove(request, "deadline")
        request.fail(
            DeadlineExceeded("the request's deadline passed before its work could start; retry, or raise timeout_s")
        )

    def cancel(self, request: Request) -> None:
        """The client went away: drop the request's sentences that have not started."""
        # Cancelling the awaiting task cancels request.future first, so a cancelled future still has work to drop.
        if request.cancelled or (request.future.done() and not request.future.cancelled()):
            return
        request.cancelled = True
        request.future.cancel()
        self._remove(request, "client_disconnected")

    def _remove(self, request: Request, reason: str) -> None:
        before = len(self.queue)
        self.queue = [q for q in self.queue if q.ticket is not request]
        if len(self.queue) != before and not request.started:
            self.metrics.dropped.labels(self.model, reason).inc()
        self._queue_depth.set(len(self.queue))

    # --- the loop ----------------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            if not self.queue:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._wait_for_fill()
            await self._workers.acquire()
            batch = self._take_batch()
            if not batch:
                self._workers.release()
                continue
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _wait_for_fill(self) -> None:
        """Wait as long as the batch policy says (a full batch waits, or the oldest sentence waited max_wait)."""
        while self.queue and not self._closing:
            remaining = wait_before_dispatch(self.queue, self.limits, time.monotonic())
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=remaining)
            except TimeoutError:
                return

    def _expire(self) -> None:
        now = time.monotonic()
        for request in {q.ticket for q in self.queue if q.ticket.deadline <= now}:
            self._remove(request, "deadline")
            request.fail(
                DeadlineExceeded("the request's deadline passed before its work could start; retry, or raise timeout_s")
            )

    def _take_batch(self) -> list[Queued]:
        self._expire()
        chosen = self._fair_batch(self.queue)
        picked = set(map(id, chosen))
        self.queue = [q for q in self.queue if id(q) not in picked]
        self._queue_depth.set(len(self.queue))
        now = time.monotonic()
        for q in chosen:
            if not q.ticket.started:
                q.ticket.started = True
                self.metrics.queue_wait.labels(self.model).observe(now - q.ticket.enqueued)
        return chosen

    def _fair_batch(self, queue: list[Queued]) -> list[Queued]:
        """The batch built around the sentence whose turn it is (``fair_order``: clients in turn)."""
        if not queue:
            return []
        anchor = fair_order(queue, self._last_client)[0]
        self._last_client = anchor.client
        return select_batch(queue, self.limits, anchor)

    async def _run(self, batch: list[Queued]) -> None:
        batch_id = next(self._batch_ids)
        key = batch[0].key
        started = time.monotonic()
        try:
            results, stats = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._run_batch, key, [q.payload for q in batch]
            )
        except Exception as exc:
            self._fail_batch(batch, batch_id, exc)
            return
        finally:
            self._workers.release()
            self._wakeup.set()
        self._complete_batch(batch, results, stats, batch_id, time.monotonic() - started)

    def _run_batch(self, key: Hashable, payloads: list[Any]) -> tuple[list[Any], dict[str, float]]:
        results, stats = self.runner(key, payloads)
        if len(results) != len(payloads):  # never hand out a shifted answer; fail the batch instead
            raise RuntimeError(f"the engine returned {len(results)} results for {len(payloads)} sentences")
        return results, stats

    def _fail_batch(self, batch: list[Queued], batch_id: int, exc: Exception, what: str = "batch") -> None:
        """Log the engine's exception (call from its except block), fail every request of the batch."""
        self._log_failure(batch, batch_id, what)
        self._fail_requests(batch, batch_id, what, exc)

    @staticmethod
    def _log_failure(batch: list[Queued], batch_id: int, what: str) -> None:
        log.exception(
            "engine %s %d failed (%d sentences)",
            what,
            batch_id,
            len(batch),
            extra={"batch_id": batch_id, "request_ids": sorted({q.ticket.request_id for q in batch})},
        )

    def _fail_requests(self, batch: list[Queued], batch_id: int, what: str, exc: Exception | None = None) -> None:
        """Fail every request of the batch: EngineRestarted as it is (503), any other exception as BatchFailed."""
        for request in {q.ticket for q in batch}:
            if batch_id not in request.batch_ids:
                request.batch_ids.append(batch_id)
            self._remove(request, "failed")
            if isinstance(exc, EngineRestarted):
                request.fail(exc)
            else:
                request.fail(BatchFailed(f"internal error in engine {what} {batch_id}; the request was not completed"))

    def _complete_batch(
        self, batch: list[Queued], results: list[Any], stats: dict[str, float], batch_id: int, elapsed: float
    ) -> None:
        self._seconds_per_sentence = 0.8 * self._seconds_per_sentence + 0.2 * elapsed / len(batch)
        m = self.model
        self.metrics.batch_size.labels(m).observe(len(batch))
        for stage in ("encode", "decode"):
            if stage in stats:
                self.metrics.inference.labels(m, stage).observe(stats[stage])
        self.metrics.generated_tokens.labels(m).inc(stats.get("generated_tokens", 0))
        for q, result in zip(batch, results, strict=True):
            request = q.ticket
            if batch_id not in request.batch_ids:
                request.batch_ids.append(batch_id)
            self._deliver(q, result)

    @staticmethod
    def _deliver(q: Queued, result: Any) -> None:
        """Sentence ``q`` is done: its slot in the request, the request's listener, the request when complete."""
        request = q.ticket
        if request.future.done():
            return
        request.results[q.index] = result
        request.remaining -= 1
        if request.listener is not None:
            request.listener.result(q.index, result)
        if request.remaining == 0:
            request.future.set_result(request.results)


class ContinuousScheduler(Scheduler):
    """Continuous (iteration-level) batching: one live decode per model on its own engine thread.

    The event loop queues sentences, fails requests at their deadline and cancels them when their client goes
    away; the engine thread, in a loop: frees the rows of sentences taken out since the last step, asks
    ``next_work`` whether a decoder step or a whole batch of other work comes next, admits waiting translations
    (``admit``: oldest first, within the row and cache budgets, no fixed wait) and runs one step for every live
    row, or runs the batch. Results, streamed tokens and failures go back to the event loop. Engine workers
    (MT_ENGINE_WORKERS) do not apply: steps and batches take turns on the one engine thread.
    """

    def __init__(
        self,
        model: str,
        runner: BatchRunner,
        limits: BatchLimits,
        metrics: Metrics,
        live: LiveRunner,
        live_limits: LiveLimits,
    ) -> None:
        super().__init__(model, runner, limits, metrics)
        self.live, self.live_limits = live, live_limits
        self._cond = threading.Condition()
        self._removals: list[Queued] = []  # live sentences taken out (deadline, disconnect) since the last step
        self._live: dict[Queued, None] = {}  # the sentences decoding now (an ordered set)
        self._last = "batch"
        self._last_joined: str | None = None  # the client of the last sentence that joined the decode (fair turns)
        self._thread: threading.Thread | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Future | None = None
        # the per-step series, labelled once (every step updates them)
        self._step_rows = metrics.step_rows.labels(model)
        self._step_seconds = metrics.inference.labels(model, "step")
        self._live_rows = metrics.live_rows.labels(model)
        self._generated = metrics.generated_tokens.labels(model)

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._event_loop = asyncio.get_running_loop()
        self._stopped = self._event_loop.create_future()
        self._thread = threading.Thread(target=self._engine_thread, name=f"engine-{self.model}", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Refuse new work, finish what was accepted (decoding and streams included), then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._stopped is not None:
            await self._stopped
        self._executor.shutdown(wait=True)

    # --- the event loop's side ---------------------------------------------------------------
    def _enqueue(self, items: list[Queued]) -> None:
        for q in items:
            if self.live.accepts(q.key):
                q.rows, q.positions = self.live.cost(q.key, q.payload)
        with self._cond:
            self.queue.extend(items)
            self._cond.notify()
        self._queue_depth.set(len(self.queue))

    def _deadline_passed(self, request: Request) -> None:
        """The deadline came: the request's waiting sentences are dropped and its live ones leave the decode at
        the next step (504 now). Whole batches of other work that already run are finished and answered."""
        if request.future.done():
            return
        with self._cond:
            decoding = any(q.ticket is request for q in self._live)
            waiting = any(q.ticket is request for q in self.queue)
        if request.started and not (decoding or waiting):
            return
        self._remove(request, "deadline")
        when = "while it was being decoded" if decoding else "before its work could start"
        request.fail(DeadlineExceeded(f"the request's deadline passed {when}; retry, or raise timeout_s"))

    def _remove(self, request: Request, reason: str) -> None:
        """Drop the request's waiting sentences and take its live ones out of the decode (at the next step)."""
        with self._cond:
            before = len(self.queue)
            self.queue = [q for q in self.queue if q.ticket is not request]
            removed = before - len(self.queue)
            live = [q for q in self._live if q.ticket is request]
            for q in live:
                del self._live[q]
            if live:
                self._removals.extend(live)
                self._cond.notify()
        if removed or live:
            self.metrics.dropped.labels(self.model, reason).inc()
        if live:
            self.metrics.freed_rows.labels(self.model, reason).inc(sum(q.rows for q in live))
        self._queue_depth.set(len(self.queue))

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
        with self._cond:
            if self._live and not self.queue and not self._removals:  # the usual decode step: nothing to decide
                return "step", [], []
            while True:
                removals, self._removals = self._removals, []
                decode_waiting = other_waiting = False
                for q in self.queue:
                    if self.live.accepts(q.key):
                        decode_waiting = True
                    else:
                        other_waiting = True
                    if decode_waiting and other_waiting:
                        break
                action = next_work(bool(self._live), decode_waiting, other_waiting, self._last)
                if action != "idle" or removals:
                    break
                if self._closing:
                    return None
                self._cond.wait()
            chosen: list[Queued] = []
            if action == "step":
                waiting = fair_order([q for q in self.queue if self.live.accepts(q.key)], self._last_joined)
                load = LiveLoad(sum(q.rows for q in self._live), max((q.positions for q in self._live), default=0))
                chosen = admit(waiting, load, self.live_limits, self.live.bytes_per_position)
                self._live.update(dict.fromkeys(chosen))
                if chosen:
                    self._last_joined = chosen[-1].client
            elif action == "batch":
                chosen = self._fair_batch([q for q in self.queue if not self.live.accepts(q.key)])
            if chosen:
                taken = set(map(id, chosen))
                self.queue = [q for q in self.queue if id(q) not in taken]
                now = time.monotonic()
                for q in chosen:
                    if not q.ticket.started:
                        q.ticket.started = True
                        self.metrics.queue_wait.labels(self.model).observe(now - q.ticket.enqueued)
        self._queue_depth.set(len(self.queue))
        return action, chosen, removals

    def _step(self, joining: list[Queued]) -> None:
        """Newcomers join (encoder), one decoder step runs for every live row; the outcome goes to the loop."""
        step_id = next(self._batch_ids)
        started = time.monotonic()
        m = self.model
        try:
            done, encode_s = ([], 0.0)
            if joining:
                items = [(q, q.key, q.payload, q.ticket.listener is not None) for q in joining]
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
                    self.metrics.time_to_first_token.labels(m).observe(now - q.ticket.enqueued)
        finished = [*done, *out.finished]
        if finished:
            with self._cond:
                for q, _ in finished:
                    self._live.pop(q, None)
        if joining:
            self.metrics.inference.labels(m, "encode").observe(encode_s)
        if out.rows:
            self._step_rows.observe(out.rows)
            self._step_seconds.observe(out.seconds)
        if joining or finished:  # the live rows change only then
            self._live_rows.set(self.live.rows)
        if out.generated_tokens:
            self._generated.inc(out.generated_tokens)
        if out.finished:
            per_sentence = (now - started) / len(out.finished)
            self._seconds_per_sentence = 0.8 * self._seconds_per_sentence + 0.2 * per_sentence
        if finished or out.progress or joining:
            self._post(self._step_done, joining, finished, out.progress, step_id)

    def _fail_live(self, held: list[Queued], step_id: int, what: str, exc: Exception) -> None:
        """A failed step, or an engine that died: every live sentence and ``held`` fail; the decode starts empty."""
        with self._cond:
            failed = [*self._live, *held]
            self._live.clear()
        self._log_failure(failed, step_id, what)
        self.live.reset()
        self.metrics.live_rows.labels(self.model).set(0)
        self._post(self._fail_requests, list(dict.fromkeys(failed)), step_id, what, exc)

    def _step_done(self, joined: list[Queued], finished: list, progress: dict, step_id: int) -> None:
        """On the event loop: the access log's batch ids, streamed tokens, finished sentences."""
        for q in joined:
            if step_id not in q.ticket.batch_ids:
                q.ticket.batch_ids.append(step_id)
        for q, tokens in progress.items():
            request = q.ticket
            if request.listener is not None and not request.future.done():
                request.listener.progress(q.index, tokens)
        for q, result in finished:
            self._deliver(q, result)

    def _batch(self, batch: list[Queued]) -> None:
        """One whole batch of other work (embeddings, attention) on the engine thread."""
        batch_id = next(self._batch_ids)
        started = time.monotonic()
        try:
            results, stats = self._run_batch(batch[0].key, [q.payload for q in batch])
        except Exception as exc:
            if isinstance(exc, EngineRestarted):  # the live decode died with the engine
                self._fail_live(batch, batch_id, "batch", exc)
            else:
                self._log_failure(batch, batch_id, "batch")
                self._post(self._fail_requests, batch, batch_id, "batch", exc)
            return
        self._post(self._complete_batch, batch, results, stats, batch_id, time.monotonic() - started)
