"""The embedded state store (service/state/embedded.py): records, expiry, atomic counters, kept across a reopen,
shared by two processes' connections."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.state import StateUnavailable, open_store


def run(coro):
    return asyncio.run(coro)


def test_records_put_get_delete_list_and_survive_a_reopen(tmp_path):
    async def first():
        store = open_store(tmp_path)
        await store.put("glossaries", "b", {"name": "B", "entries": {"Arzt": "physician"}})
        await store.put("glossaries", "a", {"name": "A"})
        assert await store.create("glossaries", "a", {"name": "other"}) is False
        assert await store.create("glossaries", "c", {"name": "C"}) is True
        assert await store.delete("glossaries", "c") is True
        assert await store.delete("glossaries", "c") is False
        assert await store.get("other", "a") is None
        await store.close()

    async def second():
        store = open_store(tmp_path)
        assert await store.records("glossaries") == {
            "a": {"name": "A"},
            "b": {"name": "B", "entries": {"Arzt": "physician"}},
        }
        assert await store.get("glossaries", "b") == {"name": "B", "entries": {"Arzt": "physician"}}
        await store.close()

    run(first())
    run(second())
    assert (tmp_path / "files").is_dir()


def test_an_expired_record_is_gone_and_its_key_free_again(tmp_path):
    async def go():
        store = open_store(tmp_path)
        await store.put("documents", "job", {"status": "done"}, ttl_s=0.05)
        assert await store.get("documents", "job") == {"status": "done"}
        time.sleep(0.1)
        assert await store.get("documents", "job") is None
        assert await store.records("documents") == {}
        assert await store.delete("documents", "job") is False
        assert await store.create("documents", "job", {"status": "new"}) is True
        await store.close()

    run(go())


def test_counters_refuse_an_amount_that_would_pass_the_limit_and_keep_their_value(tmp_path):
    async def go():
        store = open_store(tmp_path)
        assert (await store.add("quota", "k", 60, limit=100)).value == 60
        refused = await store.add("quota", "k", 50, limit=100)
        assert (refused.accepted, refused.value) == (False, 60)
        assert (await store.add("quota", "k", 40, limit=100)).accepted
        assert await store.counter("quota", "k") == 100
        assert (await store.add("quota", "k", 5)).value == 105  # no limit
        assert await store.counter("quota", "other") == 0
        await store.close()

    run(go())


def test_concurrent_adds_from_two_connections_never_pass_the_limit(tmp_path):
    async def go():
        one, two = open_store(tmp_path), open_store(tmp_path)
        results = await asyncio.gather(*(s.add("quota", "k", 1, limit=50) for _ in range(40) for s in (one, two)))
        assert sum(r.accepted for r in results) == 50
        assert await one.counter("quota", "k") == 50
        await one.close()
        await two.close()

    run(go())


def test_an_unusable_state_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StateUnavailable, match="MT_STATE_DIR"):
        open_store(blocker / "state")
