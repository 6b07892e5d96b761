"""The cache reordering's copy in numpy: ``np.take`` into a kept buffer (service/engine/reorder.py) against fancy
indexing, from the session's contiguous output and from a view with its first columns cut (the live decode cuts
the columns no row uses any more, service/engine/live.py).

    python -m bench.experiments.cache_gather [--rows 32 128] [--width 10 21 40] [--calls 300]

One cache tensor (rows, 4 heads, width + 1, 64) float32, rows in a random order; wall microseconds per copy,
median of 5 interleaved timings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from service.engine.reorder import ReorderBuffers


def timings(rows: int, width: int, calls: int, heads: int = 4, d_head: int = 64) -> dict[str, float]:
    """Microseconds per copy of each way, median of 5 interleaved timings."""
    rng = np.random.default_rng(0)
    array = rng.standard_normal((rows, heads, width + 1, d_head), dtype=np.float32)
    order = rng.permutation(rows)
    buffers = ReorderBuffers()
    ways = {
        "take, whole width": lambda: buffers.take(array, order, "whole"),
        "fancy, whole width": lambda: array[order],
        "take, first column cut": lambda: buffers.take(array[:, :, 1:], order, "cut"),
        "fancy, first column cut": lambda: array[order, :, 1:],
    }
    results: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(5):
        for name, way in ways.items():
            way()
            started = time.perf_counter()
            for _ in range(calls):
                way()
            results[name].append((time.perf_counter() - started) / calls * 1e6)
    return {name: statistics.median(times) for name, times in results.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.experiments.cache_gather",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--width", type=int, nargs="+", default=[10, 21, 40])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    header = None
    for rows in args.rows:
        for width in args.width:
            t = timings(rows, width, args.calls)
            if header is None:
                header = list(t)
                print("| rows | width | " + " | ".join(f"{name} us" for name in header) + " | cut: take / fancy |")
                print("|---:|---:|" + "---:|" * (len(header) + 1))
            cells = " | ".join(f"{t[name]:.0f}" for name in header)
            ratio = t["take, first column cut"] / t["fancy, first column cut"]
            print(f"| {rows} | {width} | {cells} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
