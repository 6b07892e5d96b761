"""Per-API-key policy as plain functions: labels, key matching, the token bucket, the queue share."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from service.access.keys import (
    Bucket,
    KeyRates,
    key_label,
    key_queue_cap,
    key_retry_after,
    match_key,
    take_token,
)
from service.settings import AccessSettings

KEYS = ["alpha-3f9c2e", "beta-77d1a0"]


def test_a_label_is_the_sha256_prefix_and_never_the_key():
    label = key_label(KEYS[0])
    assert label == hashlib.sha256(KEYS[0].encode()).hexdigest()[:8]
    assert len(label) == 8 and KEYS[0] not in label
    assert key_label(KEYS[0]) != key_label(KEYS[1])


def test_match_key_names_the_key_offered_and_nothing_else():
    assert match_key(KEYS[1], KEYS) == key_label(KEYS[1])
    for wrong in ("", "alpha", KEYS[0][:-1], KEYS[0] + "x", KEYS[0].upper()):
        assert match_key(wrong, KEYS) is None, wrong
    assert match_key(KEYS[0], []) is None


def test_the_bucket_allows_a_burst_then_refuses_until_it_refills():
    bucket = Bucket(tokens=3.0, updated=0.0)
    assert [take_token(bucket, 0.0, rate=2.0, burst=3) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = take_token(bucket, 0.0, rate=2.0, burst=3)
    assert wait == pytest.approx(0.5)  # one token at 2/s
    assert take_token(bucket, 0.25, rate=2.0, burst=3) == pytest.approx(0.25)  # a refusal costs no token
    assert take_token(bucket, 0.5, rate=2.0, burst=3) == 0.0
    assert take_token(bucket, 100.0, rate=2.0, burst=3) == 0.0  # an idle key refills up to the burst, not beyond
    assert bucket.tokens == pytest.approx(2.0)


def test_key_rates_keep_one_bucket_per_key_and_name_the_key_s_limit():
    rates = KeyRates(rate=1.0, burst=2)
    a, b = key_label(KEYS[0]), key_label(KEYS[1])
    assert rates.check(a, 10.0) is None and rates.check(a, 10.0) is None
    refused = rates.check(a, 10.0)
    assert refused is not None and refused.retry_after == 1 and refused.label == a
    message = str(refused)
    assert a in message and "1 requests/s" in message and "burst 2" in message and "MT_KEY_RATE_PER_S" in message
    assert KEYS[0] not in message
    assert rates.check(b, 10.0) is None  # another key's bucket is full
    assert set(rates.buckets) == {a, b}


def test_rate_zero_means_no_rate_limit():
    rates = KeyRates(rate=0.0, burst=1)
    assert all(rates.check("k", 0.0) is None for _ in range(1000))
    assert rates.buckets == {}


def test_retry_after_is_rounded_up_to_whole_seconds():
    rates = KeyRates(rate=0.4, burst=1)
    assert rates.check("k", 0.0) is None
    assert rates.check("k", 0.0).retry_after == 3  # 2.5 s to the next token


def test_the_queue_share_and_its_retry_after():
    assert key_queue_cap(1024, 0.5) == 512
    assert key_queue_cap(3, 0.1) == 1  # at least one sentence
    assert key_retry_after(10, 2, cap=12, active_keys=2, seconds_per_sentence=1.0, workers=1) is None
    assert key_retry_after(12, 1, cap=12, active_keys=2, seconds_per_sentence=1.0, workers=1) == 24  # served in turn
    assert key_retry_after(12, 1, cap=12, active_keys=1, seconds_per_sentence=1.0, workers=2) == 6
    assert key_retry_after(12, 1, cap=12, active_keys=1, seconds_per_sentence=0.001, workers=1) == 1


def test_two_keys_with_one_label_are_refused_at_start_up():
    colliding = None
    seen: dict[str, str] = {}
    for i in range(200_000):  # 8 hex digits: a collision among ~2^16 keys is likely (birthday bound)
        key = f"k{i}"
        label = key_label(key)
        if label in seen:
            colliding = (seen[label], key)
            break
        seen[label] = key
    assert colliding is not None
    with pytest.raises(ValidationError, match="share the first 8 hex digits"):
        AccessSettings(api_keys=",".join(colliding))
    same_twice = AccessSettings(api_keys=f"{KEYS[0]},{KEYS[0]}")
    assert same_twice.api_keys == [KEYS[0], KEYS[0]]  # the same key twice is one key
