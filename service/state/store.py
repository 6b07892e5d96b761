"""The state store interface: what every implementation offers, and how the service picks one.

Three kinds of state, each in a ``namespace`` (a short name such as "glossaries", "documents", "quota"):

- records: JSON objects under a key, optionally expiring (``ttl_s``); put, get, delete, list;
- counters: integers changed atomically, optionally against a limit (``add`` refuses an amount that would
  pass it, so two replicas can never both spend the last characters of a quota);
- files: a directory shared by whoever shares the store (``files_dir``), for uploads and results too big for
  a record.

Every method is a coroutine: the embedded store runs SQLite in a thread, a shared one talks over the network.
An implementation that cannot reach its backend raises ``StateUnavailable``; routes answer it with 503 and
Retry-After (``service/api/errors.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

Record = dict[str, Any]


class StateUnavailable(Exception):
    """The store's backend cannot be reached or refused a write; ``retry_after`` seconds is a fair wait."""

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class CounterChange:
    """What ``StateStore.add`` did: ``accepted`` False when the amount would have passed the limit (then nothing
    was added); ``value`` is the counter after the call either way."""

    accepted: bool
    value: int


class StateStore(Protocol):
    """Records, counters and files that outlive a request (see the module docstring)."""

    name: str  # "embedded", "redis", ... (logs, /readyz, metrics)
    files_dir: Path

    async def put(self, namespace: str, key: str, record: Record, ttl_s: float | None = None) -> None:
        """Store ``record`` under ``key`` (replacing any), expiring ``ttl_s`` seconds from now when given."""
        ...

    async def create(self, namespace: str, key: str, record: Record, ttl_s: float | None = None) -> bool:
        """Store ``record`` only if ``key`` holds nothing (or an expired record): True when stored."""
        ...

    async def get(self, namespace: str, key: str) -> Record | None:
        """The record under ``key``, or None (never stored, deleted or expired)."""
        ...

    async def delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``'s record: True when there was one."""
        ...

    async def records(self, namespace: str) -> dict[str, Record]:
        """Every live record of ``namespace`` by key, in key order."""
        ...

    async def add(self, namespace: str, key: str, amount: int, limit: int | None = None) -> CounterChange:
        """Add ``amount`` to a counter (0 when new) unless the result would pass ``limit``; atomic."""
        ...

    async def counter(self, namespace: str, key: str) -> int:
        """A counter's value (0 when never added to)."""
        ...

    async def close(self) -> None:
        """Release connections; the store is not used afterwards."""
        ...
