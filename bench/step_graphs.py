"""Per-step cost of decoder graphs: decoder.onnx vs decoder_step.onnx (any interface) vs decoder_step_batch.onnx
(the whole-batch search's interface-3 graph of a bundle that has both step graphs), fp32 / int8, CPU time.

    nice -n 10 python -m bench.step_graphs --bundle model_repository/de-en/1 [--bundle other/bundle ...] \
        [--rows 32 128] [--past 10] [--src 15] [--beam 4] [--beam-above 32] [--graphs decoder_step ...]

One bundle with both step graphs compares them in one run (``--graphs decoder_step decoder_step_batch``): the
last table gives, per variant and row count, each step graph's time over decoder_step's (the live decode's graph).

One decoder step (one new token per row, a cache of --past tokens, a source of --src tokens) with random
inputs, timed as the process's CPU time (one intra-op thread, the engine's session options), repeats
interleaved across graphs, median per step and per row. ``rows`` = 32 is greedy at batch 32 (top_k 1); ``rows`` = 128
is beam 4 at batch 32 (32 sources, top_k 8). Each graph is asked for what the engine asks of it:
decoder.onnx log_probs + presents; decoder_step top candidates (log_probs for greedy on interface 2)
+ presents.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from core.graphs import BATCH_STEP, LIVE_STEP, VOCAB_IDS, step_interface

GRAPHS = ("decoder", LIVE_STEP, BATCH_STEP)

ROOT = Path(__file__).resolve().parent.parent


def _session(path: Path):
    from engine.runtime import create_session  # the engine's own session settings

    return create_session(path, "cpu", intra_op_threads=1, inter_op_threads=1)


def step_feeds(session, config: dict, rows: int, sources: int, src: int, past: int, top_k: int, rng):
    layers, heads, d_head = config["n_decoder_layers"], config["n_heads"], config["d_model"] // config["n_heads"]
    names = {i.name for i in session.get_inputs()}
    per_source = step_interface(session.get_modelmeta().custom_metadata_map) >= 2
    n_cross = sources if per_source else rows

    def rand(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    feeds = {"tokens": rng.integers(4, config["vocab_size"], (rows, 1)), "src_mask": np.ones((n_cross, src), bool)}
    if "cross_keys" in names:  # decoder.onnx: stacked caches
        feeds.update(
            cross_keys=rand(layers, rows, heads, src, d_head),
            cross_values=rand(layers, rows, heads, src, d_head),
            past_keys=rand(layers, rows, heads, past, d_head),
            past_values=rand(layers, rows, heads, past, d_head),
        )
        return feeds, ["log_probs", "present_keys", "present_values"]
    for i in range(layers):
        feeds[f"cross_keys_{i}"], feeds[f"cross_values_{i}"] = (
            rand(n_cross, heads, src, d_head),
            rand(n_cross, heads, src, d_head),
        )
        feeds[f"past_keys_{i}"], feeds[f"past_values_{i}"] = (
            rand(rows, heads, past, d_head),
            rand(rows, heads, past, d_head),
        )
    presents = [f"present_{kind}_{i}" for i in range(layers) for kind in ("keys", "values")]
    fetch_top = "top_k" in names and (top_k > 1 or not per_source)
    if "top_k" in names:
        feeds["top_k"] = np.array([top_k if fetch_top else 0])
    if "positions" in names:  # interface 3: every row at position ``past``, grouped by source
        from engine.step_inputs import uniform_inputs

        feeds.update(uniform_inputs(rows, n_cross, past))
    if VOCAB_IDS in names:  # a shortlist-capable graph: empty = the whole vocabulary (what is timed here)
        feeds[VOCAB_IDS] = np.zeros(0, np.int64)
    return feeds, (["top_log_probs", "top_ids"] if fetch_top else ["log_probs"]) + presents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.step_graphs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bundle", nargs="+", required=True)
    parser.add_argument("--variants", nargs="+", default=["fp32", "int8"])
    parser.add_argument("--rows", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--beam", type=int, default=4, help="rows per source when rows > --beam-above")
    parser.add_argument("--beam-above", type=int, default=32, help="rows from which a step is a beam step")
    parser.add_argument("--past", type=int, default=10)
    parser.add_argument("--src", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30, help="steps per timing")
    parser.add_argument(
        "--graphs", nargs="+", default=list(GRAPHS), choices=GRAPHS, help="the bundle graphs to time (when present)"
    )
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    cases = []
    for bundle in args.bundle:
        manifest = json.loads((Path(bundle) / "manifest.json").read_text())
        for variant in args.variants:
            for graph in args.graphs:
                if graph in manifest["variants"].get(variant, {}):
                    path = Path(bundle) / manifest["variants"][variant][graph]
                    cases.append((f"{bundle}:{variant}/{graph}", _session(path), manifest["model"]))
    results: dict[tuple[str, int], list[float]] = {}
    for rows in args.rows:
        beam = args.beam if rows > args.beam_above else 1
        prepared = [
            (name, s, *step_feeds(s, cfg, rows, rows // beam, args.src, args.past, 2 * beam if beam > 1 else 1, rng))
            for name, s, cfg in cases
        ]
        for _, session, feeds, fetch in prepared:
            for _ in range(3):
                session.run(fetch, feeds)
        for _ in range(args.repeats):
            for name, session, feeds, fetch in prepared:
                started = time.process_time()
                for _ in range(args.steps):
                    session.run(fetch, feeds)
                results.setdefault((name, rows), []).append((time.process_time() - started) / args.steps * 1e3)
    print(f"| graph | rows | CPU ms / step (median of {args.repeats}) | CPU us / row |")
    print("|---|---:|---:|---:|")
    for (name, rows), times in results.items():
        print(f"| {name} | {rows} | {statistics.median(times):.2f} | {1e3 * statistics.median(times) / rows:.0f} |")
    ratios = step_ratios({key: statistics.median(times) for key, times in results.items()})
    if ratios:
        print(f"\n| graph | rows | CPU time / {LIVE_STEP}'s |")
        print("|---|---:|---:|")
        for (name, rows), ratio in ratios.items():
            print(f"| {name} | {rows} | {ratio:.2f}x |")
    return 0


def step_ratios(medians: dict[tuple[str, int], float]) -> dict[tuple[str, int], float]:
    """Each other graph's median over the same bundle and variant's decoder_step (the live decode's graph), per row
    count; keys are ``<bundle>:<variant>/<graph>`` as timed."""
    ratios = {}
    for (name, rows), median in medians.items():
        prefix, graph = name.rsplit("/", 1)
        live = medians.get((f"{prefix}/{LIVE_STEP}", rows))
        if graph != LIVE_STEP and live:
            ratios[name, rows] = median / live
    return ratios


if __name__ == "__main__":
    sys.exit(main())
