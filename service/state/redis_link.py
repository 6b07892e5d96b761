"""One connection to Redis shared by everything that uses it (the state store, key rate limits, the translation
cache, model version announcements), and its health: whether Redis answers, said once in the log when it changes
and in the ``mt_state_store_up`` gauge (through ``on_change``).

Redis down or slow must never hold a request up for long: every call has a deadline (``MT_REDIS_TIMEOUT_S``), no
retries, and after a failure the link stays "down" without trying again until a background ping gets an answer
(about once a second), so requests meanwhile fail fast with ``StateUnavailable`` and each user falls back to its
local way (see docs/deployment.md, "Scaling out", for what each one does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from service.state.store import StateUnavailable

log = logging.getLogger(__name__)

PING_EVERY_S = 1.0
RETRY_AFTER_S = 5


def redacted(url: str) -> str:
    """The URL without its password (for logs and errors)."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{parts.scheme}://{host}:{parts.port or 6379}{parts.path}"


class RedisLink:
    """A Redis client with a deadline per call and an up/down state (see the module docstring)."""

    def __init__(self, url: str, timeout_s: float = 0.5, on_change: Callable[[bool], None] | None = None) -> None:
        self.url, self.where, self.timeout_s = url, redacted(url), timeout_s
        self.client = aioredis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self.up = True  # until a call says otherwise
        self.on_change = on_change or (lambda up: None)
        self.on_change(True)
        self._watch: asyncio.Task | None = None
        self._reconnected: list[Callable[[], Awaitable[None]]] = []

    def on_reconnect(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run ``hook`` each time Redis answers again after being down (e.g. resubscribe to announcements)."""
        self._reconnected.append(hook)

    def unavailable(self, why: str = "") -> StateUnavailable:
        return StateUnavailable(
            f"the shared state store (Redis at {self.where}) is unavailable{': ' + why if why else ''}; retry shortly",
            RETRY_AFTER_S,
        )

    async def call(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        """``await fn(client)`` within the deadline; StateUnavailable at once while down, or when this call fails."""
        if not self.up:
            raise self.unavailable("down since an earlier call failed")
        try:
            return await asyncio.wait_for(fn(self.client), self.timeout_s * 2)
        except (TimeoutError, RedisError, OSError) as exc:
            self._down(exc)
            raise self.unavailable(f"{type(exc).__name__}: {exc}") from exc

    def _down(self, exc: BaseException) -> None:
        if not self.up:
            return
        self.up = False
        self.on_change(False)
        log.warning(
            "state store DEGRADED: Redis at %s does not answer (%s: %s); reads fall back to this replica's local "
            "state, shared writes answer 503, key rate limits are per replica (MT_KEY_RATE_PER_S / MT_REPLICAS), "
            "the translation cache is local; checking again every %.0f s",
            self.where,
            type(exc).__name__,
            exc,
            PING_EVERY_S,
        )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._watch is None or self._watch.done():
            self._watch = loop.create_task(self._wait_for_redis())

    async def _wait_for_redis(self) -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(PING_EVERY_S)
            try:
                await asyncio.wait_for(self.client.ping(), self.timeout_s * 2)
            except (TimeoutError, RedisError, OSError):
                continue
            break
        # The pool still holds the connections opened before Redis went away: each would fail its next call and put
        # the link down again. Close them all; calls from now on open fresh ones.
        with contextlib.suppress(RedisError, OSError):
            await self.client.connection_pool.disconnect()
        self.up = True
        for hook in self._reconnected:
            try:
                await hook()
            except Exception:  # a hook that fails must not keep the link down
                log.exception("state store: a reconnect hook failed")
        self.on_change(True)
        down_s = time.monotonic() - started
        log.warning("state store RECOVERED: Redis at %s answers again after %.1f s", self.where, down_s)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        await self.client.aclose()
