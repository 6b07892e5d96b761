"""The embedded state store: one SQLite database in the state directory (``MT_STATE_DIR``), files beside it.

Kept across restarts; shared safely by processes on one machine (SQLite locks the file; WAL mode lets readers
run beside a writer), not by replicas on several machines (that is the shared store's job). Calls run in a
worker thread so the event loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from service.state.store import CounterChange, Record, StateUnavailable

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, expires REAL,
    PRIMARY KEY (namespace, key)
);
CREATE TABLE IF NOT EXISTS counters (
    namespace TEXT NOT NULL, key TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
);
"""


class EmbeddedStore:
    """``StateStore`` on SQLite (``state_dir/state.sqlite3``) with ``state_dir/files`` for files."""

    name = "embedded"

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.files_dir = self.state_dir / "files"
        self._lock = threading.Lock()
        try:
            self.files_dir.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.state_dir / "state.sqlite3", check_same_thread=False, isolation_level=None, timeout=10.0
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StateUnavailable(
                f"the state directory {self.state_dir} cannot be used (MT_STATE_DIR): {exc}"
            ) from exc

    async def _run(self, fn, *args: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                try:
                    return fn(*args)
                except sqlite3.Error as exc:
                    raise StateUnavailable(f"state store error: {exc}") from exc

        return await asyncio.to_thread(locked)

    # records -----------------------------------------------------------------------------------------------
    def _put(self, namespace: str, key: str, record: Record, ttl_s: float | None, only_new: bool) -> bool:
        now = time.time()
        expires = None if ttl_s is None else now + ttl_s
        value = json.dumps(record, ensure_ascii=False)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if only_new:
                row = self._db.execute(
                    "SELECT expires FROM records WHERE namespace=? AND key=?", (namespace, key)
                ).fetchone()
                if row is not None and (row[0] is None or row[0] > now):
                    self._db.execute("ROLLBACK")
                    return False
            self._db.execute(
                "INSERT OR REPLACE INTO records (namespace, key, value, expires) VALUES (?, ?, ?, ?)",
                (namespace, key, value, expires),
            )
            self._db.execute("DELETE FROM records WHERE expires IS NOT NULL AND expires <= ?", (now,))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return True

    async def put(self, namespace: str, key: str, record: Record, ttl_s: float | None = None) -> None:
        await self._run(self._put, namespace, key, record, ttl_s, False)

    async def create(self, namespace: str, key: str, record: Record, ttl_s: float | None = None) -> bool:
        return await self._run(self._put, namespace, key, record, ttl_s, True)

    def _get(self, namespace: str, key: str) -> Record | None:
        row = self._db.execute(
            "SELECT value FROM records WHERE namespace=? AND key=? AND (expires IS NULL OR expires > ?)",
            (namespace, key, time.time()),
        ).fetchone()
        return None if row is None else json.loads(row[0])

    async def get(self, namespace: str, key: str) -> Record | None:
        return await self._run(self._get, namespace, key)

    def _delete(self, namespace: str, key: str) -> bool:
        cur = self._db.execute(
            "DELETE FROM records WHERE namespace=? AND key=? AND (expires IS NULL OR expires > ?)",
            (namespace, key, time.time()),
        )
        return cur.rowcount > 0

    async def delete(self, namespace: str, key: str) -> bool:
        return await self._run(self._delete, namespace, key)

    def _records(self, namespace: str) -> dict[str, Record]:
        rows = self._db.execute(
            "SELECT key, value FROM records WHERE namespace=? AND (expires IS NULL OR expires > ?) ORDER BY key",
            (namespace, time.time()),
        ).fetchall()
        return {key: json.loads(value) for key, value in rows}

    async def records(self, namespace: str) -> dict[str, Record]:
        return await self._run(self._records, namespace)

    # counters ----------------------------------------------------------------------------------------------
    def _add(self, namespace: str, key: str, amount: int, limit: int | None) -> CounterChange:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute(
                "SELECT value FROM counters WHERE namespace=? AND key=?", (namespace, key)
            ).fetchone()
            value = 0 if row is None else row[0]
            if limit is not None and value + amount > limit:
                self._db.execute("ROLLBACK")
                return CounterChange(False, value)
            self._db.execute(
                "INSERT OR REPLACE INTO counters (namespace, key, value) VALUES (?, ?, ?)",
                (namespace, key, value + amount),
            )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return CounterChange(True, value + amount)

    async def add(self, namespace: str, key: str, amount: int, limit: int | None = None) -> CounterChange:
        return await self._run(self._add, namespace, key, amount, limit)

    def _counter(self, namespace: str, key: str) -> int:
        row = self._db.execute("SELECT value FROM counters WHERE namespace=? AND key=?", (namespace, key)).fetchone()
        return 0 if row is None else row[0]

    async def counter(self, namespace: str, key: str) -> int:
        return await self._run(self._counter, namespace, key)

    async def close(self) -> None:
        with self._lock:
            self._db.close()
