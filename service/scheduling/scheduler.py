"""One model's scheduler: the request queue the serving layer submits to, and the driver that runs its work.

``Scheduler`` is the same for every way of batching: ``submit`` admits a request (or refuses it), queues its
sentences, fails it at its deadline and withdraws it when its client goes away, and answers it when its last
sentence is done. When and on which thread the work runs is its ``Driver``'s: service/scheduling/dynamic.py or
continuous.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from service.scheduling.batch_policy import Queued
from service.scheduling.errors import QueueFull
from service.scheduling.queue import RequestQueue
from service.scheduling.tickets import Listener, Ticket


class Driver(Protocol):
    """Runs a queue's work: takes its sentences when their turn comes and hands their results back."""

    @property
    def mode(self) -> str:
        """continuous, dynamic or off (/v1/models)."""

    def start(self) -> None:
        """Start taking work (on the running event loop)."""

    async def stop(self) -> None:
        """The queue is closed: finish what it accepted, then stop."""

    def put(self, items: list[Queued]) -> None:
        """Queue a request's sentences and wake whoever takes them."""

    def withdraw(self, ticket: Ticket, reason: str) -> None:
        """Take a request's sentences out: the waiting ones, and those decoding (continuous batching)."""

    def deadline_passed(self, ticket: Ticket) -> None:
        """The request's deadline came: fail it, unless its work is past the point where it can be dropped."""


class Scheduler:
    def __init__(self, queue: RequestQueue, driver: Driver) -> None:
        self.queue, self.driver = queue, driver

    @property
    def mode(self) -> str:
        return self.driver.mode

    def start(self) -> None:
        self.driver.start()

    async def stop(self) -> None:
        """Refuse new work, finish what was accepted, then stop the driver."""
        self.queue.close()
        await self.driver.stop()

    def refusal(self, n_items: int = 1, client: str = "") -> QueueFull | None:
        """The QueueFull a request of ``n_items`` sentences from ``client`` would get now, or None."""
        return self.queue.refusal(n_items, client)

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
        priority: int = 0,
        timing: Any = None,
    ) -> list[Any]:
        """Queue one request's sentences and wait for their results (in order).

        ``batch_ids``, when given, receives the id of every engine batch that ran (or failed) this request's
        work (for the access log). At the deadline, work that has not started is dropped (504). ``listener``, when
        given, hears each sentence's result as it comes (and its streamed tokens, with continuous batching).
        ``client`` (an API key's label) is whose work it is: each client has its share of the queue, and clients
        are served in turn. ``priority`` 0 is interactive; background work (1, document jobs) runs when no
        interactive sentence waits (service/scheduling/batch_policy.py). ``timing``
        (service/observability/inference_stats.py RequestTiming),
        when given, gets the seconds the request waited in the queue and those from its first sentence taken to its
        answer.
        """
        ticket, items = self.queue.open(
            key, payloads, lengths, timeout_s, request_id, batch_ids, listener, client, priority
        )
        self.driver.put(items)
        timer = asyncio.get_running_loop().call_later(timeout_s, self.driver.deadline_passed, ticket)
        try:
            results = await ticket.future
        except asyncio.CancelledError:
            self.cancel(ticket)
            raise
        finally:
            timer.cancel()
        if timing is not None and ticket.started:
            timing.queue_s += ticket.started_at - ticket.enqueued
            timing.infer_s += time.monotonic() - ticket.started_at
        return results

    def cancel(self, ticket: Ticket) -> None:
        """The client went away: withdraw the request's sentences."""
        # Cancelling the awaiting task cancels ticket.future first, so a cancelled future still has work to drop.
        if ticket.cancelled or (ticket.future.done() and not ticket.future.cancelled()):
            return
        ticket.cancelled = True
        ticket.future.cancel()
        self.driver.withdraw(ticket, "client_disconnected")
