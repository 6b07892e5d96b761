"""Byte-bounded least-recently-used stores of opaque values (the translation cache's storage; what is cached and
under which key is service/serving/cache.py's business).

``LocalLRU``: a dict in this process, its oldest entries evicted beyond ``max_bytes`` (keys and values counted).
``RedisLRU``: the same in Redis, shared by the replicas: values under ``mt:cache:<key>``, recency in a sorted set,
the byte total in a counter, evictions done by the Lua script that stores (atomic; standalone Redis, as the
script touches the keys it evicts). The bound is the cache's own, so the cache can never evict glossaries or
document jobs, whatever Redis's maxmemory policy. While Redis is down, ``RedisLRU`` uses a local one.
"""

from __future__ import annotations

from collections import OrderedDict

from service.state.redis_link import RedisLink
from service.state.store import StateUnavailable

PREFIX = "mt:cache:"

# KEYS[1] the entry, KEYS[2] the recency set; ARGV: member. The value or nil; a hit becomes the most recent.
GET = """
local v = redis.call('GET', KEYS[1])
if v then redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[2] .. ':tick'), ARGV[1]) end
return v
"""

# KEYS[1] the entry, KEYS[2] the recency set, KEYS[3] the byte total; ARGV: member, value, cap, entry prefix.
PUT = """
local before = redis.call('STRLEN', KEYS[1])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[2] .. ':tick'), ARGV[1])
local total = redis.call('INCRBY', KEYS[3], string.len(ARGV[2]) + string.len(ARGV[1]) - before)
local cap = tonumber(ARGV[3])
while total > cap do
  local oldest = redis.call('ZPOPMIN', KEYS[2])
  if #oldest == 0 then break end
  local key = ARGV[4] .. oldest[1]
  total = redis.call('INCRBY', KEYS[3], -(redis.call('STRLEN', key) + string.len(oldest[1])))
  redis.call('DEL', key)
end
return total
"""


class LocalLRU:
    """Values by key in this process, at most ``max_bytes`` of keys and values together."""

    shared = False

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.bytes = max_bytes, 0
        self._entries: OrderedDict[str, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> bytes | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= len(key) + len(old)
        self._entries[key] = value
        self.bytes += len(key) + len(value)
        while self.bytes > self.max_bytes and self._entries:
            k, v = self._entries.popitem(last=False)
            self.bytes -= len(k) + len(v)


class RedisLRU:
    """Values by key in Redis, at most ``max_bytes`` in all; a ``LocalLRU`` while Redis is down."""

    shared = True

    def __init__(self, link: RedisLink, max_bytes: int, local_bytes: int | None = None) -> None:
        self.link, self.max_bytes = link, max_bytes
        self.local = LocalLRU(local_bytes if local_bytes is not None else max_bytes)
        self._get = link.client.register_script(GET)
        self._put = link.client.register_script(PUT)

    async def get(self, key: str) -> bytes | None:
        keys = [PREFIX + key, PREFIX + "lru"]
        try:
            return await self.link.call(lambda c: self._get(keys=keys, args=[key], client=c))
        except StateUnavailable:
            return await self.local.get(key)

    async def put(self, key: str, value: bytes) -> None:
        keys = [PREFIX + key, PREFIX + "lru", PREFIX + "bytes"]
        args = [key, value, str(self.max_bytes), PREFIX]
        try:
            await self.link.call(lambda c: self._put(keys=keys, args=args, client=c))
        except StateUnavailable:
            await self.local.put(key, value)
