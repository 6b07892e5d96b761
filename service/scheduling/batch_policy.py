"""Which waiting sentences form the next engine batch, and when: pure functions over the queue, no asyncio.

The queue is a list of ``Queued`` sentences, oldest first. A batch holds sentences with equal keys (the work's
options) only, at most ``max_sentences`` of them and at most ``max_tokens`` padded tokens (sentences x the
longest). It is built around the oldest sentence from the sentences closest to it in length (less padding;
the oldest always goes, so nothing starves). It is dispatched at once when an engine worker is idle (a lone request
pays nothing for batching; batches form from what queues while the workers are busy), else when a full batch of the
oldest sentence's key is waiting or the oldest sentence has waited ``max_wait_s``. The plumbing around it is
``service/scheduling/``.

Fairness between clients (API keys, ``Queued.client``): ``fair_order`` takes the waiting sentences from the clients
in turn, each client's oldest first, starting after the client served last. A batch is built around the first
sentence of that order instead of the oldest, and continuous batching admits in that order, so one client's
backlog never sits ahead of another client's work. With one client (no API keys) the order is the queue's.

Priority (``Queued.priority``: 0 interactive requests, 1 background work such as document jobs): the order above is
kept within a priority, and a more urgent sentence always comes first. A batch holds sentences of one priority (the
most urgent waiting), so a short request never waits behind, nor decodes beside, a document's sentences; background
work runs when no interactive sentence waits (continuous batching admits it behind them, within the step's budgets).

Continuous batching (``MT_SCHEDULER=continuous``): before every decoder step, ``admit`` lets waiting sentences
join the live decode, oldest first, while the step's rows and its padded key/value cache stay within
``LiveLimits``; ``next_work`` alternates decoder steps with whole batches of the other work (embeddings,
attention), so neither waits for more than one of the other's turns.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import chain, zip_longest
from typing import Any


@dataclass
class BatchLimits:
    max_sentences: int = 32
    max_tokens: int = 4096
    max_wait_s: float = 0.005
    dispatch_when_idle: bool = True  # an idle worker takes the queue at once (``wait_before_dispatch``)
    max_queue: int = 1024
    workers: int = 1
    max_queue_per_client: int = 0  # sentences one client (API key) may have waiting; 0 = no per-client cap


@dataclass(eq=False)
class Queued:
    """One waiting sentence: its batch key, length in subwords, enqueue time, and what the plumbing attaches."""

    key: Hashable
    length: int
    enqueued: float
    ticket: Any = None  # the request it belongs to
    index: int = 0  # its position in that request
    payload: Any = None
    rows: int = 1  # continuous batching: decoder rows it takes (its beam size)
    positions: int = 0  # continuous batching: the cache positions it may reach (its length limit)
    client: str = ""  # who sent it: an API key's label (service/access/keys.py), "" without API keys
    priority: int = 0  # 0 interactive; higher waits for every more urgent sentence (BACKGROUND: document jobs)


INTERACTIVE, BACKGROUND = 0, 1


def most_urgent(queue: Sequence[Queued]) -> list[Queued]:
    """The waiting sentences of the most urgent priority present, in queue order (a batch's candidates)."""
    if not queue:
        return []
    top = min(q.priority for q in queue)
    return [q for q in queue if q.priority == top]


def fair_order(queue: Sequence[Queued], last_client: str | None = None) -> list[Queued]:
    """The sentences taken from the clients in turn (round robin), each client's in queue order (oldest first);
    the turn starts with the first client after ``last_client`` in label order. One client: the queue's order.
    More urgent sentences (lower ``priority``) come before less urgent ones, the order kept within each."""
    by_client: dict[str, list[Queued]] = {}
    for q in queue:
        by_client.setdefault(q.client, []).append(q)
    if len(by_client) <= 1:
        order = list(queue)
    else:
        clients = sorted(by_client)
        if last_client is not None:
            after = [c for c in clients if c > last_client]
            clients = after + [c for c in clients if c <= last_client]
        turns = zip_longest(*(by_client[c] for c in clients))
        order = [q for q in chain.from_iterable(turns) if q is not None]
    return sorted(order, key=lambda q: q.priority)  # stable: the turns kept within a priority


def wait_before_dispatch(queue: Sequence[Queued], limits: BatchLimits, now: float, idle_workers: int = 0) -> float:
    """Seconds to wait before taking a batch: 0 when an engine worker is idle (waiting could only delay it: nothing
    else runs that the wait would let finish), when a full batch of the oldest sentence's key waits, or when the
    oldest has waited max_wait_s; otherwise the rest of its wait. The queue must not be empty."""
    if idle_workers > 0 and limits.dispatch_when_idle:
        return 0.0
    oldest = queue[0]
    same = sum(1 for q in queue if q.key == oldest.key)
    if same >= limits.max_sentences:
        return 0.0
    return max(0.0, oldest.enqueued + limits.max_wait_s - now)


def select_batch(queue: Sequence[Queued], limits: BatchLimits, anchor: Queued | None = None) -> list[Queued]:
    """The next batch, shortest first: ``anchor`` (default: the oldest sentence; with several clients, the first
    of ``fair_order``) and its nearest-length companions of the same key."""
    if not queue:
        return []
    first = anchor if anchor is not None else queue[0]
    same = sorted((q for q in queue if q.key == first.key), key=lambda q: q.length)
    at = same.index(first)
    chosen, lo, hi, width = [first], at - 1, at + 1, first.length
    while len(chosen) < limits.max_sentences and (lo >= 0 or hi < len(same)):
        left = same[lo] if lo >= 0 else None
        right = same[hi] if hi < len(same) else None
        if right is None or (left is not None and first.length - left.length <= right.length - first.length):
            pick = left
        else:
            pick = right
        new_width = max(width, pick.length)
        if new_width * (len(chosen) + 1) > limits.max_tokens:
            break
        chosen.append(pick)
        width = new_width
        if pick is left:
            lo -= 1
        else:
            hi += 1
    return sorted(chosen, key=lambda q: q.length)


def retry_after(depth: int, n_items: int, limits: BatchLimits, seconds_per_sentence: float, workers: int) -> int | None:
    """None when ``n_items`` more sentences fit the queue; else the seconds a client should wait (the queue's
    depth at the measured seconds per sentence, shared by ``workers`` running at once; at least 1)."""
    if depth + n_items <= limits.max_queue:
        return None
    return max(1, round(depth * seconds_per_sentence / workers))


@dataclass
class LiveLimits:
    """Budgets of one decoder step in continuous batching."""

    max_rows: int = 128  # rows of a step (a beam-4 sentence takes 4)
    max_cache_bytes: int = 512 << 20  # the padded self-attention cache the live sentences may reach


@dataclass
class LiveLoad:
    """What decodes now: its rows and the widest cache any live sentence may reach (its length limit)."""

    rows: int = 0
    positions: int = 0


def projected_cache_bytes(rows: int, positions: int, bytes_per_position: int) -> int:
    """The padded cache at its widest: every row as wide as the longest length limit (left padding)."""
    return rows * positions * bytes_per_position


def admit(waiting: Sequence[Queued], load: LiveLoad, limits: LiveLimits, bytes_per_position: int) -> list[Queued]:
    """The waiting sentences, in the order given (oldest first; with several clients, ``fair_order``), that join
    the live decode before its next step.

    Strictly in order: the first sentence that does not fit the row or cache budget stops admission, so no
    later sentence overtakes it and nothing starves (it joins as soon as enough rows leave). A sentence larger
    than the budgets on its own joins when nothing else decodes.
    """
    chosen: list[Queued] = []
    rows, positions = load.rows, load.positions
    for q in waiting:
        new_rows, new_positions = rows + q.rows, max(positions, q.positions)
        fits = new_rows <= limits.max_rows and (
            projected_cache_bytes(new_rows, new_positions, bytes_per_position) <= limits.max_cache_bytes
        )
        if not fits and rows > 0:
            break
        chosen.append(q)
        rows, positions = new_rows, new_positions
        if not fits:  # an oversized sentence alone
            break
    return chosen


def next_work(decoding: bool, decode_waiting: bool, other_waiting: bool, last: str) -> str:
    """What the engine thread does next: ``"step"`` (a decoder step, admitting waiting sentences first),
    ``"batch"`` (one whole batch of other work) or ``"idle"``. Steps and batches alternate while both have work:
    a large embedding request delays decoding by at most one of its batches, and a busy decode never starves it.
    """
    wants_step = decoding or decode_waiting
    if other_waiting and (last != "batch" or not wants_step):
        return "batch"
    if wants_step:
        return "step"
    return "idle"
