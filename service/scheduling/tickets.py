"""A request as the schedulers hold it: a ticket for its sentences' results, answered once, in order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from service.scheduling.errors import DeadlineExceeded


class Listener(Protocol):
    """Hears a request's sentences as they progress (called on the event loop)."""

    def progress(self, index: int, tokens: list[int]) -> None:
        """Tokens of sentence ``index`` that became final (streaming; continuous batching only)."""

    def result(self, index: int, result: Any) -> None:
        """Sentence ``index`` is done."""


@dataclass(eq=False)
class Ticket:
    """One request's sentences: their results as they come, whether its work started, who waits for it."""

    key: Hashable
    n_items: int
    deadline: float
    future: asyncio.Future
    enqueued: float = field(default_factory=time.monotonic)
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    started: bool = False
    started_at: float = 0.0  # when the engine took its first sentence (time.monotonic)
    cancelled: bool = False
    request_id: str = ""
    batch_ids: list[int] = field(default_factory=list)
    listener: Listener | None = None

    def fail(self, exc: Exception) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def ran_in(self, batch_id: int) -> None:
        """Engine batch (or step) ``batch_id`` ran some of this request's work (for the access log)."""
        if batch_id not in self.batch_ids:
            self.batch_ids.append(batch_id)

    def deliver(self, index: int, result: Any) -> None:
        """Sentence ``index`` is done: its slot, the listener, the request's answer when it was the last."""
        if self.future.done():
            return
        self.results[index] = result
        self.remaining -= 1
        if self.listener is not None:
            self.listener.result(index, result)
        if self.remaining == 0:
            self.future.set_result(self.results)

    def progress(self, index: int, tokens: list[int]) -> None:
        """Streamed tokens of sentence ``index``, to the listener while the request is still answered."""
        if self.listener is not None and not self.future.done():
            self.listener.progress(index, tokens)


def deadline_exceeded(decoding: bool = False) -> DeadlineExceeded:
    """The failure of a request whose deadline passed: before its work started, or (continuous batching) while
    its sentences were being decoded."""
    when = "while it was being decoded" if decoding else "before its work could start"
    return DeadlineExceeded(f"the request's deadline passed {when}; retry, or raise timeout_s")
