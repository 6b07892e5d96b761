"""One model's waiting sentences and the bookkeeping both ways of batching share, with no thread of its own.

``RequestQueue`` admits a request or refuses it (ShuttingDown, RequestTooLarge, QueueFull, KeyQueueFull), holds its
sentences (``batch_policy.Queued``, each pointing at its ``Ticket``) until a driver takes them, marks tickets
started as their first sentence is taken, and records what a batch produced or how it failed. Every change of the
list happens under ``cond``: the continuous driver's engine thread takes work while the event loop queues more.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from service.access.keys import key_retry_after
from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BatchLimits, Queued, fair_order, most_urgent, retry_after, select_batch
from service.scheduling.errors import (
    BatchFailed,
    EngineRestarted,
    KeyQueueFull,
    QueueFull,
    RequestTooLarge,
    ShuttingDown,
)
from service.scheduling.runners import BatchRunner, Stats
from service.scheduling.tickets import Listener, Ticket

log = logging.getLogger(__name__)

# observe(work key (None for a decoder step), sentences or rows, seconds): one engine execution happened
Observer = Callable[[Hashable | None, int, float], None]


class RequestQueue:
    def __init__(
        self, model: str, limits: BatchLimits, metrics: Metrics, workers: int, observe: Observer | None = None
    ) -> None:
        """``workers``: the batches or decodes that run at once (a full queue's Retry-After divides by it);
        ``observe`` hears of every engine execution of this queue's work (the inference statistics)."""
        self.model, self.limits, self.metrics, self.workers = model, limits, metrics, workers
        self.observe = observe
        self.items: list[Queued] = []  # oldest first; replaced or extended under ``cond``, never edited in place
        self.cond = threading.Condition()  # guards ``items`` and ``closing``; the continuous engine thread waits on it
        self.closing = False
        self.seconds_per_sentence = 0.05  # running estimate, for Retry-After
        self._batch_ids = itertools.count(1)
        self._last_client: str | None = None  # the client whose sentence anchored the last batch (fair turns)
        self._depth = metrics.queue_depth.labels(model)  # labelled once: every queue change sets it

    def __len__(self) -> int:
        return len(self.items)

    # --- admission ---------------------------------------------------------------------------
    def open(
        self,
        key: Hashable,
        payloads: Sequence[Any],
        lengths: Sequence[int],
        timeout_s: float,
        request_id: str,
        batch_ids: list[int] | None,
        listener: Listener | None,
        client: str,
        priority: int = 0,
    ) -> tuple[Ticket, list[Queued]]:
        """A request's ticket and its sentences, not yet queued; raises what refuses it (nothing is counted then,
        but a key's refusal in mt_key_rejections_total). ``priority``: batch_policy's (0 interactive)."""
        if self.closing:
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
        future = asyncio.get_running_loop().create_future()
        ticket = Ticket(key, len(payloads), time.monotonic() + timeout_s, future, request_id=request_id)
        if batch_ids is not None:
            ticket.batch_ids = batch_ids
        ticket.listener = listener
        ticket.results = [None] * len(payloads)
        ticket.remaining = len(payloads)
        pairs = enumerate(zip(payloads, lengths, strict=True))
        return ticket, [
            Queued(key, n, ticket.enqueued, ticket, i, p, client=client, priority=priority) for i, (p, n) in pairs
        ]

    def refusal(self, n_items: int = 1, client: str = "") -> QueueFull | None:
        """The QueueFull a request of ``n_items`` sentences would get now (Retry-After estimated from the queue
        depth and the measured seconds per sentence), or None when it fits: KeyQueueFull when ``client``'s share
        of the queue is full, else QueueFull when the whole queue is."""
        cap = self.limits.max_queue_per_client
        if client and cap:
            items = self.items  # one snapshot: the engine thread replaces the list, never edits it in place
            mine = sum(1 for q in items if q.client == client)
            active = len({q.client for q in items} | {client})
            wait = key_retry_after(mine, n_items, cap, active, self.seconds_per_sentence, self.workers)
            if wait is not None:
                return KeyQueueFull(wait, client, mine, cap)
        depth = len(self.items)
        retry = retry_after(depth, n_items, self.limits, self.seconds_per_sentence, self.workers)
        return None if retry is None else QueueFull(retry, depth, self.limits.max_queue)

    def close(self) -> None:
        """Refuse new work (ShuttingDown); what was accepted is still taken."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()

    # --- the list ----------------------------------------------------------------------------
    def put(self, items: list[Queued]) -> None:
        with self.cond:
            self.items.extend(items)
            self.cond.notify()
        self._depth.set(len(self.items))

    def remove(self, ticket: Ticket) -> int:
        """Take the ticket's waiting sentences off the queue; returns how many there were."""
        with self.cond:
            before = len(self.items)
            self.items = [q for q in self.items if q.ticket is not ticket]
            removed = before - len(self.items)
        self._depth.set(len(self.items))
        return removed

    def take(self, chosen: list[Queued]) -> None:
        """The chosen sentences leave the queue for the engine; their tickets are started (queue wait observed)."""
        if not chosen:
            return
        with self.cond:
            taken = set(map(id, chosen))
            self.items = [q for q in self.items if id(q) not in taken]
        self._depth.set(len(self.items))
        now = time.monotonic()
        for q in chosen:
            if not q.ticket.started:
                q.ticket.started, q.ticket.started_at = True, now
                self.metrics.queue_wait.labels(self.model).observe(now - q.ticket.enqueued)

    def expired(self, now: float) -> set[Ticket]:
        """The tickets with a sentence still waiting whose deadline has passed."""
        return {q.ticket for q in self.items if q.ticket.deadline <= now}

    def fair_batch(self, candidates: list[Queued]) -> list[Queued]:
        """The batch built around the sentence whose turn it is (``fair_order``: clients in turn), from the
        sentences of the most urgent priority waiting."""
        candidates = most_urgent(candidates)
        if not candidates:
            return []
        anchor = fair_order(candidates, self._last_client)[0]
        self._last_client = anchor.client
        return select_batch(candidates, self.limits, anchor)

    # --- batches -----------------------------------------------------------------------------
    def next_batch_id(self) -> int:
        return next(self._batch_ids)

    def learn(self, seconds_per_sentence: float) -> None:
        """Fold one measurement into the estimate Retry-After is computed from."""
        self.seconds_per_sentence = 0.8 * self.seconds_per_sentence + 0.2 * seconds_per_sentence

    @staticmethod
    def run(runner: BatchRunner, key: Hashable, payloads: list[Any]) -> tuple[list[Any], Stats]:
        """One batch on ``runner``; a runner that answers a different number of sentences fails the batch."""
        results, stats = runner(key, payloads)
        if len(results) != len(payloads):  # never hand out a shifted answer; fail the batch instead
            raise RuntimeError(f"the engine returned {len(results)} results for {len(payloads)} sentences")
        return results, stats

    def finish(self, batch: list[Queued], results: list[Any], stats: Stats, batch_id: int, elapsed: float) -> None:
        """On the event loop: a whole batch ran; its metrics, and each sentence's result to its ticket."""
        self.learn(elapsed / len(batch))
        m = self.model
        self.metrics.batch_size.labels(m).observe(len(batch))
        if self.observe is not None:
            self.observe(batch[0].key, len(batch), elapsed)
        for stage in ("encode", "decode"):
            if stage in stats:
                self.metrics.inference.labels(m, stage).observe(stats[stage])
        self.metrics.generated_tokens.labels(m).inc(stats.get("generated_tokens", 0))
        for q, result in zip(batch, results, strict=True):
            q.ticket.ran_in(batch_id)
            q.ticket.deliver(q.index, result)

    def fail(
        self,
        batch: list[Queued],
        batch_id: int,
        what: str,
        exc: Exception | None,
        withdraw: Callable[[Ticket, str], None],
    ) -> None:
        """On the event loop: fail every request of the batch, ``withdraw``-ing its other sentences (the driver's
        way): EngineRestarted as it is (503), any other exception as BatchFailed."""
        for ticket in {q.ticket for q in batch}:
            ticket.ran_in(batch_id)
            withdraw(ticket, "failed")
            if isinstance(exc, EngineRestarted):
                ticket.fail(exc)
            else:
                ticket.fail(BatchFailed(f"internal error in engine {what} {batch_id}; the request was not completed"))

    @staticmethod
    def log_failure(batch: list[Queued], batch_id: int, what: str) -> None:
        """Log the engine's exception: call from the except block that caught it."""
        log.exception(
            "engine %s %d failed (%d sentences)",
            what,
            batch_id,
            len(batch),
            extra={"batch_id": batch_id, "request_ids": sorted({q.ticket.request_id for q in batch})},
        )
