"""Dynamic batching (MT_SCHEDULER=dynamic, or off: one sentence per batch): a batch is formed once and decoded to
its end.

An asyncio loop waits as ``batch_policy.wait_before_dispatch`` says (not at all while a worker is idle; else a full
batch, or the oldest sentence waited max_wait), takes the batch ``select_batch`` builds around the sentence whose
turn it is, and runs it in one of MT_ENGINE_WORKERS worker threads, off the event loop. A request whose deadline
passes before its work starts fails with DeadlineExceeded and costs no engine work.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BatchLimits, Queued, wait_before_dispatch
from service.scheduling.queue import Observer, RequestQueue
from service.scheduling.runners import BatchRunner
from service.scheduling.scheduler import Scheduler
from service.scheduling.tickets import Ticket, deadline_exceeded


def dynamic_scheduler(
    model: str, runner: BatchRunner, limits: BatchLimits, metrics: Metrics, observe: Observer | None = None
) -> Scheduler:
    queue = RequestQueue(model, limits, metrics, limits.workers, observe)
    return Scheduler(queue, DynamicDriver(queue, runner))


class DynamicDriver:
    def __init__(self, queue: RequestQueue, runner: BatchRunner) -> None:
        self.queue, self.runner = queue, runner
        workers = queue.limits.workers
        self._wakeup = asyncio.Event()
        self._workers = asyncio.Semaphore(workers)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"engine-{queue.model}")
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        self._busy = 0  # batches running in the worker threads

    @property
    def mode(self) -> str:
        return "off" if self.queue.limits.max_sentences == 1 else "dynamic"

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"scheduler-{self.queue.model}")

    async def stop(self) -> None:
        """Finish the batches of what was accepted, then stop the loop and the worker threads."""
        self._wakeup.set()
        if self._task is not None:
            await self._task
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        self._executor.shutdown(wait=True)

    # --- the event loop's side ---------------------------------------------------------------
    def put(self, items: list[Queued]) -> None:
        self.queue.put(items)
        self._wakeup.set()

    def deadline_passed(self, ticket: Ticket) -> None:
        """The deadline came while the request still waited (e.g. behind a long max_wait): fail it now."""
        if ticket.started or ticket.future.done():
            return  # started work is finished and answered
        self.withdraw(ticket, "deadline")
        ticket.fail(deadline_exceeded())

    def withdraw(self, ticket: Ticket, reason: str) -> None:
        if self.queue.remove(ticket) and not ticket.started:
            self.queue.metrics.dropped.labels(self.queue.model, reason).inc()

    # --- the loop ----------------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            if not self.queue.items:
                if self.queue.closing:
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
            self._busy += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _wait_for_fill(self) -> None:
        """Wait as long as the batch policy says (a full batch waits, or the oldest sentence waited max_wait)."""
        while self.queue.items and not self.queue.closing:
            idle = self.queue.limits.workers - self._busy
            remaining = wait_before_dispatch(self.queue.items, self.queue.limits, time.monotonic(), idle)
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=remaining)
            except TimeoutError:
                return

    def _take_batch(self) -> list[Queued]:
        for ticket in self.queue.expired(time.monotonic()):
            self.withdraw(ticket, "deadline")
            ticket.fail(deadline_exceeded())
        chosen = self.queue.fair_batch(self.queue.items)
        self.queue.take(chosen)
        return chosen

    async def _run(self, batch: list[Queued]) -> None:
        batch_id = self.queue.next_batch_id()
        payloads = [q.payload for q in batch]
        started = time.monotonic()
        try:
            results, stats = await asyncio.get_running_loop().run_in_executor(
                self._executor, self.queue.run, self.runner, batch[0].key, payloads
            )
        except Exception as exc:
            self.queue.log_failure(batch, batch_id, "batch")
            self.queue.fail(batch, batch_id, "batch", exc, self.withdraw)
            return
        finally:
            self._busy -= 1
            self._workers.release()
            self._wakeup.set()
        self.queue.finish(batch, results, stats, batch_id, time.monotonic() - started)
