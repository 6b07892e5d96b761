"""Dynamic batching between the serving layer and the engine: the asyncio plumbing around ``batch_policy``.

Requests are split into sentences; sentences with equal keys (the work's frozen options) are merged into
engine batches that ``service/batch_policy.py`` chooses and times. The engine runs in worker threads, off the
event loop; each result goes back to its own request slot. The queue is bounded (QueueFull) and a request whose
deadline passes before its work starts fails with DeadlineExceeded and costs no engine work. Nothing here
knows HTTP: the API maps these exceptions to status codes (service/api/errors.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from service.batch_policy import BatchLimits, Queued, retry_after, select_batch, wait_before_dispatch
from service.metrics import Metrics

log = logging.getLogger(__name__)

# run_batch(key, payloads) -> (one result per payload, stats {"encode": s, "decode": s, "generated_tokens": n})
BatchRunner = Callable[[Hashable, list[Any]], tuple[list[Any], dict[str, float]]]


class SchedulerError(Exception):
    pass


class QueueFull(SchedulerError):
    def __init__(self, retry_after: int, depth: int, limit: int) -> None:
        super().__init__(f"the queue is full ({depth} of {limit} sentences waiting); retry after {retry_after} s")
        self.retry_after = retry_after


class RequestTooLarge(SchedulerError):
    """More sentences than the queue ever holds: no retry can succeed (unlike QueueFull)."""

    def __init__(self, n_items: int, limit: int) -> None:
        super().__init__(
            f"the request has {n_items} texts but this server queues at most {limit} sentences "
            "(MT_MAX_QUEUE_SENTENCES); split it into smaller requests"
        )


class DeadlineExceeded(SchedulerError):
    pass


class ShuttingDown(SchedulerError):
    pass


class BatchFailed(SchedulerError):
    pass


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
    ) -> list[Any]:
        """Queue one request's sentences and wait for their results (in order).

        ``batch_ids``, when given, receives the id of every engine batch that ran (or failed) this request's
        work (for the access log). At the deadline, work that has not started is dropped (504).
        """
        if self._closing:
            raise ShuttingDown("the service is shutting down; retry on another instance")
        if len(payloads) > self.limits.max_queue:
            raise RequestTooLarge(len(payloads), self.limits.max_queue)
        refusal = self.refusal(len(payloads))
        if refusal is not None:
            raise refusal
        loop = asyncio.get_running_loop()
        request = Request(key, len(payloads), time.monotonic() + timeout_s, loop.create_future(), request_id=request_id)
        if batch_ids is not None:
            request.batch_ids = batch_ids
        request.results = [None] * len(payloads)
        request.remaining = len(payloads)
        pairs = enumerate(zip(payloads, lengths, strict=True))
        self.queue.extend(Queued(key, n, request.enqueued, request, i, p) for i, (p, n) in pairs)
        self.metrics.queue_depth.labels(self.model).set(len(self.queue))
        self._wakeup.set()
        timer = loop.call_later(timeout_s, self._deadline_passed, request)
        try:
            return await request.future
        except asyncio.CancelledError:
            self.cancel(request)
            raise
        finally:
            timer.cancel()

    def refusal(self, n_items: int = 1) -> QueueFull | None:
        """The QueueFull a request of ``n_items`` sentences would get now (Retry-After estimated from the queue
        depth and the measured seconds per sentence), or None when it fits."""
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
        self.metrics.queue_depth.labels(self.model).set(len(self.queue))

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
        chosen = select_batch(self.queue, self.limits)
        picked = set(map(id, chosen))
        self.queue = [q for q in self.queue if id(q) not in picked]
        self.metrics.queue_depth.labels(self.model).set(len(self.queue))
        now = time.monotonic()
        for q in chosen:
            if not q.ticket.started:
                q.ticket.started = True
                self.metrics.queue_wait.labels(self.model).observe(now - q.ticket.enqueued)
        return chosen

    async def _run(self, batch: list[Queued]) -> None:
        batch_id = next(self._batch_ids)
        key = batch[0].key
        started = time.monotonic()
        try:
            results, stats = await asyncio.get_running_loop().run_in_executor(
                self._executor, self.runner, key, [q.payload for q in batch]
            )
            if len(results) != len(batch):  # never hand out a shifted answer; fail the batch instead
                raise RuntimeError(f"the engine returned {len(results)} results for {len(batch)} sentences")
        except Exception:
            log.exception(
                "engine batch %d failed (%d sentences)",
                batch_id,
                len(batch),
                extra={"batch_id": batch_id, "request_ids": sorted({q.ticket.request_id for q in batch})},
            )
            for request in {q.ticket for q in batch}:
                if batch_id not in request.batch_ids:
                    request.batch_ids.append(batch_id)
                self._remove(request, "failed")
                request.fail(BatchFailed(f"internal error in engine batch {batch_id}; the request was not completed"))
            return
        finally:
            self._workers.release()
            self._wakeup.set()
        elapsed = time.monotonic() - started
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
            if request.future.done():
                continue
            request.results[q.index] = result
            request.remaining -= 1
            if request.remaining == 0:
                request.future.set_result(request.results)
