"""Service state that outlives a request: stored records (glossaries, document jobs), counters (character quotas)
and files, behind one interface (``store.StateStore``) so a replica set can share them: the embedded store (SQLite
in MT_STATE_DIR, the default) or the shared one (Redis, MT_REDIS_URL; redis_store.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service.state.embedded import EmbeddedStore
from service.state.redis_link import RedisLink
from service.state.redis_store import RedisStore
from service.state.store import CounterChange, Record, StateStore, StateUnavailable

__all__ = ["CounterChange", "RedisLink", "Record", "StateStore", "StateUnavailable", "open_store"]


def open_store(where: Path | Any, link: RedisLink | None = None) -> StateStore:
    """The store the settings ask for. ``where`` is the state settings group (MT_STATE_DIR, MT_REDIS_URL,
    MT_REDIS_TIMEOUT_S) or just a directory (the embedded store there). ``link``: an open Redis link to share
    (the app's, also used by rate limits and the cache); with one, or with MT_REDIS_URL set, the Redis store."""
    state_dir = Path(getattr(where, "state_dir", where))
    url = getattr(where, "redis_url", "")
    if link is None and url:
        link = RedisLink(url, getattr(where, "redis_timeout_s", 0.5))
    if link is not None:
        return RedisStore(link, state_dir)
    return EmbeddedStore(state_dir)
