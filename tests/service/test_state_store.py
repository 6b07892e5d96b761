"""The state store contract (service/state/store.py), the same cases against the embedded store (SQLite,
service/state/embedded.py) and the shared one (Redis, service/state/redis_store.py, a real redis-server): records,
expiry, atomic counters, kept across a reopen, shared by two connections; then how the Redis store degrades."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from redis_server import REDIS_SERVER, RedisServer, needs_redis

from service.state import StateUnavailable
from service.state import open_store as open_at


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/install-test-tools.sh installs it as root)")
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.kill()


@pytest.fixture(params=["embedded", "redis"])
def open_store(request):
    """``open_store(directory)`` of the store under test (each Redis case starts from an empty database)."""
    if request.param == "embedded":
        return open_at
    redis = request.getfixturevalue("redis")
    redis.flush()
    return lambda state_dir: open_at(SimpleNamespace(state_dir=state_dir, redis_url=redis.url, redis_timeout_s=2.0))


def run(coro):
    return asyncio.run(coro)


def test_records_put_get_delete_list_and_survive_a_reopen(open_store, tmp_path):
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


def test_an_expired_record_is_gone_and_its_key_free_again(open_store, tmp_path):
    async def go():
        store = open_store(tmp_path)
        await store.put("documents", "kept", {"status": "running"}, ttl_s=60)
        await store.put("documents", "job", {"status": "done"}, ttl_s=0.2)
        assert await store.get("documents", "kept") == {"status": "running"}
        time.sleep(0.3)
        assert await store.get("documents", "job") is None
        assert await store.records("documents") == {"kept": {"status": "running"}}
        assert await store.delete("documents", "job") is False
        assert await store.create("documents", "job", {"status": "new"}) is True
        await store.close()

    run(go())


def test_counters_refuse_an_amount_that_would_pass_the_limit_and_keep_their_value(open_store, tmp_path):
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


def test_concurrent_adds_from_two_connections_never_pass_the_limit(open_store, tmp_path):
    async def go():
        one, two = open_store(tmp_path), open_store(tmp_path)
        results = await asyncio.gather(*(s.add("quota", "k", 1, limit=50) for _ in range(40) for s in (one, two)))
        assert sum(r.accepted for r in results) == 50
        assert await one.counter("quota", "k") == 50
        await one.close()
        await two.close()

    run(go())


def test_an_unusable_state_directory_is_a_clear_error(open_store, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StateUnavailable, match="MT_STATE_DIR"):
        open_store(blocker / "state")


@needs_redis
def test_redis_down_reads_answer_locally_writes_refuse_and_it_recovers(tmp_path):
    """Redis killed: reads answer from this replica's local copy, writes raise StateUnavailable at once (no wait
    on every call), the link says down; Redis back: it says up again by itself and writes are shared again."""
    server = RedisServer(tmp_path / "redis").start()
    changes: list[bool] = []

    async def go():
        from service.state import RedisLink

        link = RedisLink(server.url, 0.3, changes.append)
        store = open_at(tmp_path / "state", link)
        await store.put("glossaries", "g", {"name": "G"})
        server.kill()
        assert await store.get("glossaries", "g") == {"name": "G"}  # the local copy
        assert await store.records("glossaries") == {"g": {"name": "G"}}
        started = time.monotonic()
        for _ in range(3):
            with pytest.raises(StateUnavailable, match="Redis at redis://127.0.0.1"):
                await store.put("glossaries", "h", {"name": "H"})
        with pytest.raises(StateUnavailable):
            await store.add("quota", "k", 1, limit=5)
        assert time.monotonic() - started < 2.0
        assert changes == [True, False] and not link.up
        server.start()
        deadline = time.monotonic() + 10
        while not link.up and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert link.up and changes == [True, False, True]
        assert await store.create("glossaries", "h", {"name": "H"}) is True
        assert await store.get("glossaries", "h") == {"name": "H"}
        await store.close()

    try:
        run(go())
    finally:
        server.kill()
