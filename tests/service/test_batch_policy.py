"""The batch-selection policy as plain functions over a list: no asyncio, no engine."""

from __future__ import annotations

from service.scheduling.batch_policy import (
    BatchLimits,
    LiveLimits,
    LiveLoad,
    Queued,
    admit,
    fair_order,
    next_work,
    retry_after,
    select_batch,
    wait_before_dispatch,
)


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


def test_an_idle_worker_takes_the_queue_at_once():
    limits = BatchLimits(max_sentences=3, max_wait_s=0.5)
    q = queue(("a", 5), start=10.0)
    assert wait_before_dispatch(q, limits, now=10.0, idle_workers=1) == 0.0
    assert abs(wait_before_dispatch(q, limits, now=10.0, idle_workers=0) - 0.5) < 1e-9
    always_wait = BatchLimits(max_sentences=3, max_wait_s=0.5, dispatch_when_idle=False)
    assert abs(wait_before_dispatch(q, always_wait, now=10.0, idle_workers=1) - 0.5) < 1e-9


def test_retry_after_only_when_the_queue_overflows():
    limits = BatchLimits(max_queue=10)
    assert retry_after(depth=6, n_items=4, limits=limits, seconds_per_sentence=1.0, workers=2) is None
    assert retry_after(depth=8, n_items=4, limits=limits, seconds_per_sentence=1.0, workers=2) == 4
    assert retry_after(depth=8, n_items=4, limits=limits, seconds_per_sentence=0.001, workers=2) == 1  # at least 1 s


def test_empty_queue_selects_nothing():
    assert select_batch([], BatchLimits()) == []


# --- continuous batching: admission before each decoder step, steps and whole batches taking turns ---------------


def live_queue(*specs: tuple[int, int]) -> list[Queued]:
    """Waiting translations (rows, positions), oldest first."""
    return [Queued("t", 5, float(i), rows=rows, positions=positions) for i, (rows, positions) in enumerate(specs)]


def test_admission_is_oldest_first_within_the_row_budget():
    q = live_queue((4, 20), (1, 20), (4, 20), (1, 20))
    assert admit(q, LiveLoad(), LiveLimits(max_rows=9), bytes_per_position=1) == q[:3]
    assert admit(q, LiveLoad(rows=6, positions=20), LiveLimits(max_rows=9), bytes_per_position=1) == []  # 4 > 3


def test_a_sentence_that_does_not_fit_blocks_younger_ones_so_it_cannot_starve():
    q = live_queue((8, 20), (1, 20), (1, 20))
    # 3 rows free: the beam-8 sentence waits, and the greedy ones behind it may not overtake it
    assert admit(q, LiveLoad(rows=5, positions=20), LiveLimits(max_rows=8), bytes_per_position=1) == []
    assert admit(q, LiveLoad(rows=0), LiveLimits(max_rows=8), bytes_per_position=1) == q[:1]


def test_the_cache_budget_counts_every_row_as_wide_as_the_longest_limit():
    q = live_queue((2, 100), (2, 10))
    limits = LiveLimits(max_rows=100, max_cache_bytes=2 * 100 * 8 + 2 * 100 * 8)
    assert admit(q, LiveLoad(), limits, bytes_per_position=8) == q  # 4 rows x 100 positions x 8 bytes
    assert admit(q, LiveLoad(rows=1, positions=5), limits, bytes_per_position=8) == q[:1]  # 5 rows x 100 > budget


def test_an_oversized_sentence_runs_alone_when_nothing_decodes():
    q = live_queue((16, 200), (1, 10))
    assert admit(q, LiveLoad(), LiveLimits(max_rows=8, max_cache_bytes=10), bytes_per_position=4) == q[:1]
    assert admit(q, LiveLoad(rows=1, positions=10), LiveLimits(max_rows=8), bytes_per_position=4) == []


def test_steps_and_whole_batches_take_turns():
    assert next_work(decoding=True, decode_waiting=False, other_waiting=True, last="step") == "batch"
    assert next_work(decoding=True, decode_waiting=False, other_waiting=True, last="batch") == "step"
    assert next_work(decoding=False, decode_waiting=True, other_waiting=True, last="batch") == "step"
    assert next_work(decoding=False, decode_waiting=False, other_waiting=True, last="batch") == "batch"
    assert next_work(decoding=True, decode_waiting=False, other_waiting=False, last="step") == "step"
    assert next_work(decoding=False, decode_waiting=True, other_waiting=False, last="batch") == "step"
    assert next_work(decoding=False, decode_waiting=False, other_waiting=False, last="step") == "idle"


def from_clients(*clients: str) -> list[Queued]:
    """One sentence per entry (same key, length 5), oldest first, sent by the given client."""
    return [Queued("k", 5, float(i), client=c, index=i) for i, c in enumerate(clients)]


def test_fair_order_takes_the_clients_in_turn_each_oldest_first():
    q = from_clients("f", "f", "f", "f", "q", "f", "q")
    order = fair_order(q)
    assert [x.client for x in order] == ["f", "q", "f", "q", "f", "f", "f"]
    assert [x.index for x in order if x.client == "f"] == [0, 1, 2, 3, 5]  # each client's own order kept
    assert sorted(order, key=lambda x: x.index) == q  # every sentence once


def test_fair_order_starts_after_the_client_served_last():
    q = from_clients("a", "b", "c", "a")
    assert [x.client for x in fair_order(q, last_client="a")] == ["b", "c", "a", "a"]
    assert [x.client for x in fair_order(q, last_client="c")] == ["a", "b", "c", "a"]
    assert [x.client for x in fair_order(q, last_client="gone")] == ["a", "b", "c", "a"]  # the next label after it
    assert [x.client for x in fair_order(q, last_client="b")] == ["c", "a", "b", "a"]


def test_one_client_or_none_keeps_the_queue_order():
    q = queue(("a", 10), ("b", 3), ("a", 7))
    assert fair_order(q) == q and fair_order(q, last_client="") == q
    assert fair_order([]) == []


def test_a_batch_is_built_around_the_anchor_whose_turn_it_is():
    q = [Queued("k", 10, 0.0, client="flood"), Queued("k", 10, 1.0, client="flood"), Queued("k", 30, 2.0, client="q")]
    anchor = fair_order(q, last_client="flood")[0]
    assert anchor.client == "q"
    batch = select_batch(q, BatchLimits(max_sentences=2), anchor)
    assert anchor in batch and len(batch) == 2
    assert select_batch(q, BatchLimits(max_sentences=1), anchor) == [anchor]  # the oldest does not crowd it out


def test_admission_in_fair_order_lets_a_quiet_client_past_a_flooding_backlog():
    flood = [Queued("k", 5, float(i), client="flood", rows=1, positions=10) for i in range(50)]
    quiet = Queued("k", 5, 100.0, client="quiet", rows=1, positions=10)
    waiting = [*flood, quiet]
    limits = LiveLimits(max_rows=4)
    assert quiet not in admit(waiting, LiveLoad(), limits, bytes_per_position=1)  # oldest first: behind 50
    joined = admit(fair_order(waiting, last_client="flood"), LiveLoad(), limits, bytes_per_position=1)
    assert joined[0] is quiet and len(joined) == 4
    joined = admit(fair_order(waiting, last_client="quiet"), LiveLoad(rows=2), limits, bytes_per_position=1)
    assert joined == [flood[0], quiet]  # two free rows: one sentence of each client
