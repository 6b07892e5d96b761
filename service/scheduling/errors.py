"""What a scheduler refuses or fails work with, and what a supervised engine fails held work with.

At the bottom of the service: the worker (service/execution/worker.py) raises EngineRestarted, the schedulers raise the
rest,
and the serving layer and the APIs catch them, each importing this module alone rather than the layer that raises.
Nothing here knows HTTP: service/api/errors.py maps each to its status code.
"""

from __future__ import annotations


class SchedulerError(Exception):
    pass


class QueueFull(SchedulerError):
    def __init__(self, retry_after: int, depth: int, limit: int) -> None:
        super().__init__(f"the queue is full ({depth} of {limit} sentences waiting); retry after {retry_after} s")
        self.retry_after = retry_after


class KeyQueueFull(QueueFull):
    """The client's (API key's) share of the queue is full, while other keys may still queue."""

    def __init__(self, retry_after: int, client: str, depth: int, limit: int) -> None:
        SchedulerError.__init__(
            self,
            f"API key {client} has {depth} of its {limit} queued sentences waiting (its share of the queue: "
            f"MT_KEY_QUEUE_SHARE x MT_MAX_QUEUE_SENTENCES); retry after {retry_after} s",
        )
        self.retry_after = retry_after


class RequestTooLarge(SchedulerError):
    """More sentences than the queue (or a key's share of it) ever holds: no retry can succeed (unlike QueueFull)."""

    def __init__(self, n_items: int, limit: int, client: str = "") -> None:
        where = (
            f"an API key ({client}) may queue at most {limit} sentences (MT_KEY_QUEUE_SHARE x MT_MAX_QUEUE_SENTENCES)"
            if client
            else f"this server queues at most {limit} sentences (MT_MAX_QUEUE_SENTENCES)"
        )
        super().__init__(f"the request has {n_items} texts but {where}; split it into smaller requests")


class DeadlineExceeded(SchedulerError):
    pass


class ShuttingDown(SchedulerError):
    pass


class BatchFailed(SchedulerError):
    pass


class EngineRestarted(SchedulerError):
    """The engine died while it held the request's work and was restarted (service/execution/worker.py): the work is
    lost, a retry runs on the fresh engine."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            f"the engine failed while it held this request's work and was restarted; retry after {retry_after} s"
        )
        self.retry_after = retry_after
