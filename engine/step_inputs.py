"""The extra inputs of an interface-3 or 4 decoder step (core/graphs.py RAGGED_INPUTS) for the two layouts the
engine feeds: a whole batch whose rows all sit at one position, grouped by source (``uniform_inputs``), and a live
batch whose rows have positions and sources of their own (``ragged_inputs``, engine/live.py).

Query groups are at least ``MIN_GROUP`` wide, in both layouts. The fused cross-attention multiplies a source's group
of queries with its keys and values; for a group of one query, onnxruntime's CPU GEMM takes a kernel of its own
(MLAS's M = 1 path), whose float rounding differs in the last bits from the kernel that serves two or more queries,
while a row's result is bit-identical for every group of two or more (measured: docs/reliability.md, issue 36).
A greedy sentence alone has a group of one; in a live step beside a beam sentence its group is the beam's width. Fed
groups of at least two, a row's cross-attention no longer depends on the rows beside it, which the int8 graph needs:
its next projection rounds the result to a uint8 step, and a last-bit difference at a rounding boundary becomes a
whole step (issue 36: a score 0.015 off).
"""

from __future__ import annotations

import numpy as np

MIN_GROUP = 2  # query slots per source at least (above); padding slots repeat a row of the same source


def uniform_inputs(rows: int, sources: int, past_len: int) -> dict[str, np.ndarray]:
    """Every row at position ``past_len`` with a full cache; rows grouped by source, ``rows // sources`` each (groups
    padded to ``MIN_GROUP`` by repeating the source's last row)."""
    per_source = rows // sources
    group = max(MIN_GROUP, per_source)
    by_source = np.arange(rows, dtype=np.int64).reshape(sources, per_source)
    query_rows = np.concatenate([by_source, np.repeat(by_source[:, -1:], group - per_source, axis=1)], axis=1)
    row_slots = (np.arange(rows) // per_source) * group + np.arange(rows) % per_source
    return {
        "positions": np.full((rows, 1), past_len, dtype=np.int64),
        "self_mask": np.ones((rows, past_len + 1), dtype=bool),
        "query_rows": query_rows,
        "row_slots": row_slots.astype(np.int64),
    }


def ragged_inputs(
    positions: np.ndarray, row_sources: np.ndarray, n_sources: int, width: int, right: bool = True
) -> dict[str, np.ndarray]:
    """Rows at their own ``positions`` (= real cache entries of a cache ``width`` wide: the first ones, or with
    ``right`` False the last ones) reading source ``row_sources[r]`` of ``n_sources``; a source without rows (a
    hole) reads row 0 and is ignored."""
    positions = np.asarray(positions, dtype=np.int64)
    row_sources = np.asarray(row_sources, dtype=np.int64)
    rows = len(row_sources)
    counts = np.bincount(row_sources, minlength=n_sources)
    group = max(MIN_GROUP, int(counts.max(initial=0)))
    order = np.argsort(row_sources, kind="stable")  # rows by source, in row order within a source
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(rows, dtype=np.int64)
    rank[order] = np.arange(rows) - starts[row_sources[order]]  # j: the row's place among its source's rows
    query_rows = np.zeros((n_sources, group), dtype=np.int64)
    first = np.zeros(n_sources, dtype=np.int64)
    used = counts > 0
    first[used] = order[starts[used]]  # the first row of each source
    query_rows[:] = first[:, None]  # padding slots repeat a row of the same source
    query_rows[row_sources, rank] = np.arange(rows)
    feeds = position_inputs(positions, width, right)
    return {**feeds, "query_rows": query_rows, "row_slots": row_sources * group + rank}


def position_inputs(positions: np.ndarray, width: int, right: bool = True) -> dict[str, np.ndarray]:
    """The per-row part of ``ragged_inputs``: each row's position and its self mask over the present (the cache
    ``width`` wide and the new column): a right-padded cache's first ``positions[r]`` columns and the new key/value's
    column ``positions[r]`` (step interface 4), or a left-padded cache's last ``positions[r]`` columns and the
    appended last column (``right`` False, interface 3)."""
    positions = np.asarray(positions, dtype=np.int64).reshape(-1)
    columns = np.arange(width + 1)[None, :]
    mask = columns <= positions[:, None] if right else columns >= (width - positions)[:, None]
    return {"positions": positions.reshape(-1, 1), "self_mask": mask}
