"""Service state that outlives a request: stored records (glossaries, document jobs), counters (character quotas)
and files, behind one interface (``store.StateStore``) so a replica set can share them (issue 32: Redis)."""

from pathlib import Path

from service.state.embedded import EmbeddedStore
from service.state.store import CounterChange, Record, StateStore, StateUnavailable

__all__ = ["CounterChange", "Record", "StateStore", "StateUnavailable", "open_store"]


def open_store(state_dir: Path) -> StateStore:
    """The store the settings ask for: today the embedded one (SQLite in ``state_dir``)."""
    return EmbeddedStore(state_dir)
