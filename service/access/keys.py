"""API keys as the service knows them: a label that names a key without revealing it, and the per-key limits
(a token-bucket rate limit, a share of each model's queue). Pure functions and one small holder; no HTTP, no
asyncio. The key itself is never stored beyond the settings, logged or sent back: messages, metrics and the access
log name a key by its label, the first 8 hex digits of its sha256.

With MT_API_KEYS set, each key may send ``MT_KEY_RATE_PER_S`` work requests per second (a bucket of
``MT_KEY_BURST`` tokens refilled at that rate; 0 = no rate limit) and hold at most ``MT_KEY_QUEUE_SHARE`` of
``MT_MAX_QUEUE_SENTENCES`` queued sentences per model; the scheduler takes work from the keys in turn
(``service/scheduling/batch_policy.py`` ``fair_order``).
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass, field

LABEL_HEX_DIGITS = 8


def key_label(key: str) -> str:
    """The name of a key in messages, metrics and logs: the first 8 hex digits of its sha256."""
    return hashlib.sha256(key.encode()).hexdigest()[:LABEL_HEX_DIGITS]


def match_key(offered: str, keys: list[str]) -> str | None:
    """The label of the key in ``keys`` that ``offered`` is, or None. Digests first, so every comparison is of
    equal length (compare_digest can leak a length mismatch); every key is compared, in constant time each."""
    digest = hashlib.sha256(offered.encode()).digest()
    found = None
    for key in keys:
        if hmac.compare_digest(digest, hashlib.sha256(key.encode()).digest()):
            found = key
    return None if found is None else key_label(found)


@dataclass
class Bucket:
    """A token bucket: ``tokens`` left at time ``updated`` (monotonic seconds)."""

    tokens: float
    updated: float


def take_token(bucket: Bucket, now: float, rate: float, burst: int) -> float:
    """Refill ``bucket`` at ``rate`` tokens/s up to ``burst``, then take one token: 0.0 when taken, else the
    seconds until one is there (nothing is taken; a refused request costs no token)."""
    bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.updated) * rate)
    bucket.updated = now
    if bucket.tokens >= 1.0:
        bucket.tokens -= 1.0
        return 0.0
    return (1.0 - bucket.tokens) / rate


def key_queue_cap(max_queue: int, share: float) -> int:
    """Queued sentences one key may hold in a model's queue: ``share`` of it, at least one."""
    return max(1, math.floor(max_queue * share))


def key_retry_after(
    key_depth: int, n_items: int, cap: int, active_keys: int, seconds_per_sentence: float, workers: int
) -> int | None:
    """None when ``n_items`` more sentences fit the key's share; else the seconds the key should wait: its own
    queued sentences at the measured seconds per sentence, served in turn with the other waiting keys (at least 1)."""
    if key_depth + n_items <= cap:
        return None
    return max(1, round(key_depth * seconds_per_sentence * max(1, active_keys) / workers))


class KeyRateLimited(Exception):
    """A key sent more work requests than its rate limit allows; ``retry_after`` seconds until it may again."""

    def __init__(self, label: str, retry_after: int, rate: float, burst: int) -> None:
        super().__init__(
            f"API key {label} is over its rate limit of {rate:g} requests/s (burst {burst}; MT_KEY_RATE_PER_S, "
            f"MT_KEY_BURST); retry after {retry_after} s"
        )
        self.label, self.retry_after = label, retry_after


@dataclass
class KeyRates:
    """Each key's token bucket (only configured keys ever get one: labels come from ``match_key``)."""

    rate: float  # work requests per second per key; 0 = no rate limit
    burst: int
    buckets: dict[str, Bucket] = field(default_factory=dict)

    def check(self, label: str, now: float) -> KeyRateLimited | None:
        """Take a token for one work request of ``label``: None when it may go, else the refusal."""
        if self.rate <= 0:
            return None
        bucket = self.buckets.setdefault(label, Bucket(float(self.burst), now))
        wait = take_token(bucket, now, self.rate, self.burst)
        if wait == 0.0:
            return None
        return KeyRateLimited(label, max(1, math.ceil(wait)), self.rate, self.burst)
