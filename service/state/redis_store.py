"""The shared state store: records and counters in Redis (``MT_REDIS_URL``), so every replica sees the same
glossaries, document jobs and quotas.

- records: JSON strings under ``mt:rec:<namespace>:<key>`` with Redis's own expiry (PX), listed through a set
  per namespace (``mt:idx:<namespace>``; members whose record expired are dropped when listed); ``create`` is SET
  NX, so two replicas can never both create one key;
- counters: a hash per namespace, changed by a Lua script that adds only when the result stays within the limit
  (atomic on the server: no replica can spend the last characters of a quota twice);
- files: a directory shared by the replicas (``MT_STATE_DIR/files`` on a shared volume: a compose named volume, a
  ReadWriteMany volume on Kubernetes), not Redis. Uploads and results can be megabytes; Redis keeps everything in
  memory (and in every replica of it), and a size cap would refuse documents a directory takes. Metadata that says
  where a file is lives in a record, so it is shared and expires with it.

Degradation (service/state/redis_link.py): while Redis is down, reads answer from this replica's local copy (every
record this replica wrote or read is mirrored into the embedded store in ``MT_STATE_DIR``), with a warning; writes
raise ``StateUnavailable`` (503 with Retry-After): a write that only one replica would see would be worse.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from service.state.embedded import EmbeddedStore
from service.state.redis_link import RedisLink
from service.state.store import CounterChange, Record, StateUnavailable

log = logging.getLogger(__name__)
PREFIX = "mt:"

# KEYS[1] the namespace's counter hash; ARGV: field, amount, limit ("" = none). Returns {accepted 0/1, value}.
ADD_WITH_LIMIT = """
local value = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local amount = tonumber(ARGV[2])
if ARGV[3] ~= '' and value + amount > tonumber(ARGV[3]) then
  return {0, value}
end
return {1, redis.call('HINCRBY', KEYS[1], ARGV[1], amount)}
"""

# KEYS[1] the record, KEYS[2] the namespace's index set; ARGV: key, JSON, ttl in ms ("" = none), only_new ("1").
PUT = """
local args = {'SET', KEYS[1], ARGV[2]}
if ARGV[4] == '1' then table.insert(args, 'NX') end
if ARGV[3] ~= '' then table.insert(args, 'PX'); table.insert(args, ARGV[3]) end
if redis.call(unpack(args)) then
  redis.call('SADD', KEYS[2], ARGV[1])
  return 1
end
return 0
"""


def record_key(namespace: str, key: str) -> str:
    return f"{PREFIX}rec:{namespace}:{key}"


class RedisStore:
    """``StateStore`` on Redis, with the embedded store in ``state_dir`` as this replica's local fallback."""

    name = "redis"

    def __init__(self, link: RedisLink, state_dir: Path) -> None:
        self.link = link
        self.local = EmbeddedStore(state_dir)  # mirror of records seen here: what reads answer while Redis is down
        self.files_dir = self.local.files_dir  # MT_STATE_DIR/files: shared by the replicas (a shared volume)
        self._put_script = link.client.register_script(PUT)
        self._add_script = link.client.register_script(ADD_WITH_LIMIT)
        self._counters: dict[tuple[str, str], int] = {}  # last values seen here (counter reads while Redis is down)

    # records -----------------------------------------------------------------------------------------------
    async def _put(self, namespace: str, key: str, record: Record, ttl_s: float | None, only_new: bool) -> bool:
        value = json.dumps(record, ensure_ascii=False)
        ttl = "" if ttl_s is None else str(max(1, round(ttl_s * 1000)))
        keys = [record_key(namespace, key), f"{PREFIX}idx:{namespace}"]
        args = [key, value, ttl, "1" if only_new else "0"]
        done = await self.link.call(lambda c: self._put_script(keys=keys, args=args, client=c))
        if done:
            await self._mirror(self.local.put(namespace, key, record, ttl_s))
        return bool(done)

    async def put(self, namespace: str, key: str, record: Record, ttl_s: float | None = None) -> None:
        await self._put(namespace, key, record, ttl_s, False)

    async def create(self, namespace: str, key: str, record: Record, ttl_s: float | None = None) -> bool:
        return await self._put(namespace, key, record, ttl_s, True)

    async def get(self, namespace: str, key: str) -> Record | None:
        try:
            raw = await self.link.call(lambda c: c.get(record_key(namespace, key)))
        except StateUnavailable as exc:
            log.warning("state store read of %s/%s answered from this replica's local copy: %s", namespace, key, exc)
            return await self.local.get(namespace, key)
        return None if raw is None else json.loads(raw)

    async def delete(self, namespace: str, key: str) -> bool:
        async def go(c):
            async with c.pipeline(transaction=True) as p:
                p.delete(record_key(namespace, key))
                p.srem(f"{PREFIX}idx:{namespace}", key)
                return await p.execute()

        deleted, _ = await self.link.call(go)
        await self._mirror(self.local.delete(namespace, key))
        return bool(deleted)

    async def records(self, namespace: str) -> dict[str, Record]:
        index = f"{PREFIX}idx:{namespace}"

        async def go(c):
            members = sorted(m.decode() for m in await c.smembers(index))
            values = await c.mget([record_key(namespace, m) for m in members]) if members else []
            gone = [m for m, v in zip(members, values, strict=True) if v is None]
            if gone:  # expired records: their index entries go too
                await c.srem(index, *gone)
            return {m: json.loads(v) for m, v in zip(members, values, strict=True) if v is not None}

        try:
            return await self.link.call(go)
        except StateUnavailable as exc:
            log.warning("state store listing of %s answered from this replica's local copy: %s", namespace, exc)
            return await self.local.records(namespace)

    # counters ----------------------------------------------------------------------------------------------
    async def add(self, namespace: str, key: str, amount: int, limit: int | None = None) -> CounterChange:
        args = [key, str(int(amount)), "" if limit is None else str(int(limit))]
        keys = [f"{PREFIX}cnt:{namespace}"]
        accepted, value = await self.link.call(lambda c: self._add_script(keys=keys, args=args, client=c))
        self._counters[(namespace, key)] = int(value)
        return CounterChange(bool(accepted), int(value))

    async def counter(self, namespace: str, key: str) -> int:
        try:
            raw = await self.link.call(lambda c: c.hget(f"{PREFIX}cnt:{namespace}", key))
        except StateUnavailable as exc:
            log.warning("state store counter %s/%s answered with the last value seen here: %s", namespace, key, exc)
            return self._counters.get((namespace, key), 0)
        value = 0 if raw is None else int(raw)
        self._counters[(namespace, key)] = value
        return value

    async def _mirror(self, write) -> None:
        """Keep the local copy in step; a local failure must not fail a write Redis took."""
        try:
            await write
        except StateUnavailable as exc:
            log.warning("state store: the local copy could not be updated: %s", exc)

    async def close(self) -> None:
        await self.local.close()
        await self.link.close()
