"""Key rate limits across replicas (service/state/rates.py) and the translation cache's storage and encoding
(service/state/cache.py, service/serving/cache.py), against a real redis-server where shared."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from redis_server import REDIS_SERVER, RedisServer

from engine.decoding import TranslateOptions
from engine.translation import Translation
from service.serving.cache import cache_key, decode, encode
from service.state import RedisLink
from service.state.cache import LocalLRU, RedisLRU
from service.state.rates import LocalRates, SharedRates


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (scripts/install-test-tools.sh installs it as root)")
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.kill()


def test_two_replicas_share_one_bucket_per_key(redis):
    """Burst 5 at 1 token/s: five requests pass in total, whichever replica they reach; another key has its own."""
    redis.flush()

    async def go():
        one, two = RedisLink(redis.url, 1.0), RedisLink(redis.url, 1.0)
        a, b = SharedRates(one, 1.0, 5, 2), SharedRates(two, 1.0, 5, 2)
        answers = [await (a if i % 2 else b).check("k1") for i in range(8)]
        assert sum(x is None for x in answers) == 5
        refused = next(x for x in answers if x is not None)
        assert refused.retry_after == 1 and "1 requests/s" in str(refused)
        assert await a.check("k2") is None
        await one.close()
        await two.close()

    asyncio.run(go())


def test_with_redis_down_each_replica_limits_a_key_to_its_share(tmp_path):
    """Rate 4/s, burst 4 over 2 replicas: with Redis gone, one replica lets 2 through at once (burst / replicas)."""

    async def go():
        link = RedisLink("redis://127.0.0.1:1/0", 0.2)  # nothing listens there
        rates = SharedRates(link, 4.0, 4, 2)
        answers = [await rates.check("k") for _ in range(5)]
        assert [x is None for x in answers] == [True, True, False, False, False]
        assert not link.up
        local = LocalRates(4.0, 4)
        assert sum([await local.check("k") is None for _ in range(6)]) == 4
        await link.close()

    asyncio.run(go())


def test_local_lru_keeps_within_its_bytes_and_evicts_the_least_recently_used():
    async def go():
        lru = LocalLRU(max_bytes=3 * (1 + 10))
        for key in "abc":
            await lru.put(key, b"x" * 10)
        assert await lru.get("a") == b"x" * 10  # a is now the most recent
        await lru.put("d", b"y" * 10)
        assert await lru.get("b") is None and await lru.get("a") is not None
        assert lru.bytes <= lru.max_bytes and len(lru) == 3

    asyncio.run(go())


def test_redis_lru_keeps_within_its_bytes_shared_by_two_links(redis):
    redis.flush()

    async def go():
        one, two = RedisLink(redis.url, 1.0), RedisLink(redis.url, 1.0)
        a, b = RedisLRU(one, max_bytes=3 * (64 + 100)), RedisLRU(two, max_bytes=3 * (64 + 100))
        keys = [f"{i:064x}" for i in range(4)]
        for key in keys[:3]:
            await a.put(key, b"v" * 100)
        assert await b.get(keys[0]) == b"v" * 100  # shared; and now the most recent
        await b.put(keys[3], b"w" * 100)
        assert await a.get(keys[1]) is None
        assert await a.get(keys[0]) is not None and await a.get(keys[3]) == b"w" * 100
        used = await one.call(lambda c: c.get("mt:cache:bytes"))
        assert int(used) == 3 * (64 + 100)
        await one.close()
        await two.close()

    asyncio.run(go())


def test_a_cached_translation_comes_back_whole_and_keys_tell_options_apart():
    attention = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    t = Translation(
        "A dog.", -0.5, [5, 6, 2], [7, 8, 2], [("A dog.", -0.5, [5, 6, 2]), ("Dog.", -1.0, [6, 2])], attention
    )
    back = decode(encode(t))
    assert (back.text, back.score, back.token_ids, back.source_ids, back.truncated) == (
        "A dog.",
        -0.5,
        [5, 6, 2],
        [7, 8, 2],
        False,
    )
    assert back.hypotheses == t.hypotheses
    assert back.attention.dtype == np.float32 and np.array_equal(back.attention, attention)

    class Model:
        name, version, variant = "de-en", "1", "fp32"

    base = cache_key(Model, TranslateOptions(), [7, 8, 2])
    assert base == cache_key(Model, TranslateOptions(), [7, 8, 2])
    assert base != cache_key(Model, TranslateOptions(beam_size=4), [7, 8, 2])
    assert base != cache_key(Model, TranslateOptions(return_attention=True), [7, 8, 2])
    assert base != cache_key(Model, TranslateOptions(), [7, 9, 2])
    Model.version = "2"
    assert base != cache_key(Model, TranslateOptions(), [7, 8, 2])
