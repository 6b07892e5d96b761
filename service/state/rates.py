"""Per-API-key rate limits across replicas: one token bucket per key in Redis, taken from by a Lua script (atomic
on the server, Redis's clock), so a key limited to R requests/s gets R in total however many replicas it reaches.

While Redis is down each replica falls back to its own in-process bucket (service/access/keys.py ``KeyRates``) at
``rate / MT_REPLICAS`` (burst likewise, at least 1): the total stays near the limit without any coordination.
Without Redis (one replica), ``KeyRates`` is used as it is.
"""

from __future__ import annotations

import math
import time

from service.access.keys import KeyRateLimited, KeyRates
from service.state.redis_link import RedisLink
from service.state.store import StateUnavailable

# KEYS[1] the key's bucket (a hash); ARGV: rate (tokens/s), burst. Returns the wait in seconds as a string: "0" when
# a token was taken (Lua numbers would be truncated to integers on the way back).
TAKE_TOKEN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(b[1]) or burst
local updated = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - updated) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'updated', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""


class LocalRates:
    """This process's buckets (``KeyRates``), behind the async interface the middleware uses."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.buckets = KeyRates(rate, burst)

    async def check(self, label: str) -> KeyRateLimited | None:
        """None when ``label`` may send one more work request now, else the refusal (with Retry-After)."""
        return self.buckets.check(label, time.monotonic())


class SharedRates:
    """The buckets in Redis; per replica (``rate / replicas``) while Redis is down."""

    def __init__(self, link: RedisLink, rate: float, burst: int, replicas: int) -> None:
        self.link, self.rate, self.burst = link, rate, burst
        self.fallback = KeyRates(rate / replicas, max(1, math.ceil(burst / replicas)))
        self._take = link.client.register_script(TAKE_TOKEN)

    async def check(self, label: str) -> KeyRateLimited | None:
        if self.rate <= 0:
            return None
        keys, args = [f"mt:rate:{label}"], [repr(self.rate), str(self.burst)]
        try:
            wait = float(await self.link.call(lambda c: self._take(keys=keys, args=args, client=c)))
        except StateUnavailable:
            return self.fallback.check(label, time.monotonic())
        if wait == 0.0:
            return None
        return KeyRateLimited(label, max(1, math.ceil(wait)), self.rate, self.burst)


def key_rates(rate: float, burst: int, link: RedisLink | None = None, replicas: int = 1) -> LocalRates | SharedRates:
    """The rate limiter the settings ask for: shared through ``link`` when there is one."""
    return LocalRates(rate, burst) if link is None else SharedRates(link, rate, burst, replicas)
