"""Model versions across replicas: a version swap on one replica (POST /v1/models/{name}/load, or SIGHUP) is
announced on Redis (pub/sub channel ``mt:models``) and recorded (``mt:served:<name>``); every other replica loads
the same version with the registry's live swap (service/models/registry.py ``load_version``), one replica at a time (a
per-model lock in Redis), so the set never warms up a new version everywhere at once. A replica that starts, or
that finds Redis again after an outage, catches up with a recorded version newer than its own (never back to an
older one: a replica of a newer image in a rolling update keeps its version).

A version the replica cannot load (not on its disk, bad files) is logged and the current one serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import uuid

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service.models.registry import Registry
from service.state.redis_link import RedisLink
from service.state.store import StateUnavailable

log = logging.getLogger(__name__)

CHANNEL = "mt:models"
LOCK_TTL_MS = 180_000  # a replica that dies while swapping frees the others after this
FOLLOWED = "announced by replica {origin}"


def replica_id() -> str:
    """This process among the replicas: host name (the pod's name on Kubernetes), pid, and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class VersionAnnouncer:
    """Announces this replica's swaps and follows the others' (see the module docstring)."""

    def __init__(self, link: RedisLink, registry: Registry) -> None:
        self.link, self.registry, self.me = link, registry, replica_id()
        self._tasks: set[asyncio.Task] = set()
        self._listener: asyncio.Task | None = None
        registry.on_swap = self._swapped
        link.on_reconnect(self.catch_up)

    def start(self) -> None:
        """Listen for announcements (call once models are loaded)."""
        self._listener = asyncio.get_running_loop().create_task(self._listen())
        self._spawn(self.catch_up())

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _swapped(self, name: str, version: str, reason: str) -> None:
        """The registry swapped ``name`` to ``version``: announce it, unless this swap followed an announcement."""
        if reason.startswith(FOLLOWED.split("{")[0]):
            return
        self._spawn(self.announce(name, version))

    async def announce(self, name: str, version: str) -> None:
        message = json.dumps({"model": name, "version": version, "origin": self.me})

        async def go(c):
            await c.set(f"mt:served:{name}", version)
            await c.publish(CHANNEL, message)

        try:
            await self.link.call(go)
            log.info("model %s: version %s announced to the other replicas", name, version)
        except StateUnavailable as exc:
            log.warning("model %s: version %s NOT announced to the other replicas: %s", name, version, exc)

    async def catch_up(self) -> None:
        """Serve the versions recorded in Redis (a replica started, or back after an outage)."""
        names = list(self.registry.models)
        try:
            versions = await self.link.call(lambda c: c.mget([f"mt:served:{n}" for n in names]))
        except StateUnavailable:
            return
        for name, version in zip(names, versions, strict=True):
            # only forward: a replica of a newer image (a rolling update) must not go back to an older record
            if version is not None and int(version) > int(self.registry.models[name].version):
                await self.follow(name, version.decode(), "recorded")

    async def follow(self, name: str, version: str, origin: str) -> None:
        model = self.registry.models.get(name)
        if model is None or model.version == version:
            return
        lock = f"mt:swap:{name}"
        try:
            while not await self.link.call(lambda c: c.set(lock, self.me, nx=True, px=LOCK_TTL_MS)):
                await asyncio.sleep(0.2)  # another replica is swapping: in turn
        except StateUnavailable:
            pass  # no Redis to take turns with: swap anyway, the version is what the set serves
        try:
            if self.registry.models[name].version != version:
                await self.registry.load_version(name, version, FOLLOWED.format(origin=origin))
        except Exception:
            log.exception("model %s: announced version %s refused; the current version serves on", name, version)
        finally:
            with contextlib.suppress(StateUnavailable):
                await self.link.call(lambda c: c.delete(lock))

    async def _listen(self) -> None:
        """Subscribe (on a connection of its own, without the per-call deadline) and follow each announcement;
        resubscribe after a lost connection."""
        while True:
            client = aioredis.from_url(self.link.url, socket_connect_timeout=self.link.timeout_s)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    while True:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message is not None:
                            self._heard(message["data"])
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                log.debug("announcements: subscription lost (%s); resubscribing", exc)
                await asyncio.sleep(1.0)
            finally:
                await client.aclose()

    def _heard(self, data: bytes) -> None:
        try:
            m = json.loads(data)
            name, version, origin = str(m["model"]), str(m["version"]), str(m["origin"])
        except (ValueError, KeyError, TypeError):
            log.warning("announcements: ignored a malformed message %r", data[:200])
            return
        if origin != self.me:
            log.info("model %s: version %s announced by replica %s; swapping in turn", name, version, origin)
            self._spawn(self.follow(name, version, origin))

    async def stop(self) -> None:
        for task in [self._listener, *self._tasks]:
            if task is not None:
                task.cancel()
