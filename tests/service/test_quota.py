"""Character quotas (service/access/quota.py) over the embedded state store: per-key limits and exceptions, refusals
that
charge nothing, give-backs, the anonymous caller, counts kept across a reopen."""

from __future__ import annotations

import asyncio

import pytest

from service.access.quota import ANONYMOUS, NAMESPACE, CharacterLimitExceeded, CharacterQuota
from service.state import open_store


def test_a_key_is_charged_up_to_its_limit_and_refused_beyond_it(tmp_path):
    async def go():
        store = open_store(tmp_path)
        quota = CharacterQuota(store, default=100, per_label={"bigkey00": 1000, "freekey0": 0})
        await quota.reserve("abcd1234", 60)
        with pytest.raises(CharacterLimitExceeded, match="60 of its 100") as raised:
            await quota.reserve("abcd1234", 41)
        assert (raised.value.asked, raised.value.used) == (41, 60)
        assert (await quota.usage("abcd1234")).count == 60  # the refusal charged nothing
        await quota.reserve("abcd1234", 40)  # exactly up to the limit
        await quota.reserve("bigkey00", 500)  # its own limit
        await quota.reserve("freekey0", 10**9)  # 0 = no limit
        await quota.give_back("bigkey00", 500)
        assert [(await quota.usage(k)).count for k in ("abcd1234", "bigkey00", "freekey0")] == [100, 0, 10**9]
        assert (await quota.usage("bigkey00")).limit == 1000
        await store.close()

    asyncio.run(go())


def test_without_keys_the_server_is_one_anonymous_caller_and_counts_survive_a_reopen(tmp_path):
    async def first():
        store = open_store(tmp_path)
        await CharacterQuota(store, default=10).reserve("", 7)
        await store.close()

    async def second():
        store = open_store(tmp_path)
        quota = CharacterQuota(store, default=10)
        assert await store.counter(NAMESPACE, ANONYMOUS) == 7
        with pytest.raises(CharacterLimitExceeded, match="this server"):
            await quota.reserve("", 4)
        assert (await quota.usage("")).count == 7
        await store.close()

    asyncio.run(first())
    asyncio.run(second())
