"""The batch-selection policy as plain functions over a list: no asyncio, no engine."""

from __future__ import annotations

from service.batch_policy import BatchLimits, Queued, retry_after, select_batch, wait_before_dispatch


def queue(*specs: tuple[str, int], start: float = 0.0) -> list[Queued]:
    """Queued sentences (key, length), oldest first, one second apart."""
    return [Queued(key, length, start + i) for i, (key, length) in enumerate(specs)]


def lengths(batch: list[Queued]) -> list[int]:
    return [q.length for q in batch]


def test_only_the_oldest_sentences_key_goes_and_the_oldest_always_goes():
    q = queue(("a", 10), ("b", 10), ("a", 11), ("b", 9))
    batch = select_batch(q, BatchLimits(max_sentences=8))
    assert q[0] in batch and {x.key for x in batch} == {"a"} and lengths(batch) == [10, 11]


def test_companions_are_the_nearest_in_length_and_the_batch_comes_shortest_first():
    q = queue(("k", 10), ("k", 1), ("k", 2), ("k", 9), ("k", 11), ("k", 30), ("k", 40))
    assert lengths(select_batch(q, BatchLimits(max_sentences=3))) == [9, 10, 11]


def test_padded_token_budget_bounds_the_batch():
    q = queue(*[("k", 10)] * 10)
    assert len(select_batch(q, BatchLimits(max_sentences=32, max_tokens=40))) == 4
    long_oldest = queue(("k", 60), *[("k", 2)] * 5)
    assert lengths(select_batch(long_oldest, BatchLimits(max_sentences=4, max_tokens=40))) == [60]  # still served


def test_wait_until_a_full_batch_or_the_oldest_waited_max_wait():
    limits = BatchLimits(max_sentences=3, max_wait_s=0.5)
    q = queue(("a", 5), ("b", 5), start=10.0)
    assert abs(wait_before_dispatch(q, limits, now=10.2) - 0.3) < 1e-9
    assert wait_before_dispatch(q, limits, now=10.6) == 0.0
    full = queue(("a", 5), ("a", 5), ("a", 5), start=10.0)
    assert wait_before_dispatch(full, limits, now=10.0) == 0.0


def test_retry_after_only_when_the_queue_overflows():
    limits = BatchLimits(max_queue=10, workers=2)
    assert retry_after(depth=6, n_items=4, limits=limits, seconds_per_sentence=1.0) is None
    assert retry_after(depth=8, n_items=4, limits=limits, seconds_per_sentence=1.0) == 4
    assert retry_after(depth=8, n_items=4, limits=limits, seconds_per_sentence=0.001) == 1  # at least a second


def test_empty_queue_selects_nothing():
    assert select_batch([], BatchLimits()) == []
