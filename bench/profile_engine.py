"""Where the engine's time goes: CPU split of a translation run, and operator shares of one decoder step.

    python -m bench.profile_engine --data ../shared/data/multi30k [--bundle model_repository/de-en/1] \
        [--variant int8] [--beam 1 4] [--batch 32 1] [--rows 32 128] [--live] [--flow]

1. split: the test set (sorted by length, in batches of --batch) translated by engine.Engine, the
   process's CPU time divided into the encoder graph, the decoder_step graph and everything else (the Python
   search loop, cache gathers, feeds); one warm-up pass, then one timed pass. With --live, the same batches also
   join a live decode (engine/live.py, continuous batching) that steps until they are done. With --flow,
   the test set in its own order (not sorted by length, as requests arrive) is decoded twice: in whole batches of
   --batch, and as a steady flow through one live decode that holds --batch sentences, a waiting one joining at
   the step after one finishes (what a loaded continuous server does); "cache reorder" is the time of the gathers
   that move the key/value cache rows between steps (engine/reorder.py).
2. operators: decoder_step.onnx run 200 times with random inputs (--rows rows, 10 cached tokens, source 15,
   the engine's session options) under onnxruntime's profiler; kernel time per operator type, per step.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.step_graphs import step_feeds

ROOT = Path(__file__).resolve().parent.parent


class _Timed:
    """An onnxruntime session whose ``run`` adds its CPU time to ``totals[name]``."""

    def __init__(self, session, totals: dict[str, float], name: str) -> None:
        self._session, self._totals, self._name = session, totals, name

    def run(self, *args, **kwargs):
        started = time.process_time()
        try:
            return self._session.run(*args, **kwargs)
        finally:
            self._totals[self._name] += time.process_time() - started

    def __getattr__(self, name: str):
        return getattr(self._session, name)


DECODES = ("whole", "live", "flow")


def split(
    bundle: Path,
    variant: str,
    sources: list[str],
    beam: int,
    batch: int,
    *,
    decode: str = "whole",
    by_length: bool = True,
) -> dict[str, float]:
    """CPU split of translating ``sources`` with ``batch`` sentences at a time (sorted by length unless
    ``by_length`` is false). ``decode``: "whole" batches (Engine.translate_ids), "live" (each batch joins a live
    decode, engine/live.py, stepped until it is empty) or "flow" (one live
    decode holding ``batch`` sentences, the next one joining at the step after one finishes)."""
    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions
    from engine.live import LiveBatch
    from engine.reorder import ReorderBuffers

    if decode not in DECODES:
        raise ValueError(f"decode must be one of {DECODES}")
    engine = Engine(load_bundle(bundle), variant, "cpu", intra_op_threads=1)
    ids = engine.source_ids(sources)
    if by_length:
        ids = sorted(ids, key=len)
    batches = [ids[i : i + batch] for i in range(0, len(ids), batch)]
    totals: collections.Counter = collections.Counter()
    engine.encoder = _Timed(engine.encoder, totals, "encoder")
    if decode != "whole" and engine.live_step is not engine.step_decoder:  # the live decode's own step graph
        engine.live_step = _Timed(engine.live_step, totals, "decoder_step")
    engine.step_decoder = _Timed(engine.step_decoder, totals, "decoder_step")
    options = TranslateOptions(beam_size=beam)

    def run(chunk: list[list[int]]) -> None:
        if decode == "whole":
            engine.translate_ids(chunk, options)
            return
        state = LiveBatch(engine)
        state.add([(i, source, options, False) for i, source in enumerate(chunk)])
        while len(state):
            state.step()

    def flow() -> None:
        state, waiting = LiveBatch(engine), list(enumerate(ids))[::-1]
        while waiting or len(state):
            joining = [waiting.pop() for _ in range(min(batch - len(state), len(waiting)))]
            if joining:
                state.add([(i, source, options, False) for i, source in joining])
            state.step()

    def everything() -> None:
        if decode == "flow":
            flow()
        else:
            for chunk in batches:
                run(chunk)

    # the cache reordering: the whole-batch search's gathers, or the live decode's (which may not call take)
    owner, name = (ReorderBuffers, "take") if decode == "whole" else (LiveBatch, "_gather")
    reorder = getattr(owner, name)

    def timed_reorder(self, *args, **kwargs):
        started = time.process_time()
        try:
            return reorder(self, *args, **kwargs)
        finally:
            totals["cache reorder"] += time.process_time() - started

    everything()  # warm-up
    totals.clear()
    setattr(owner, name, timed_reorder)
    try:
        started = time.process_time()
        everything()
        total = time.process_time() - started
    finally:
        setattr(owner, name, reorder)
    parts = {name: totals[name] for name in ("encoder", "decoder_step", "cache reorder")}
    return {"total": total, **parts, "other (Python)": total - sum(parts.values())}


def operators(path: Path, config: dict, rows: int, beam: int, steps: int = 200) -> dict[str, float]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(tempfile.mkdtemp(prefix="mt-profile-")) / "step")
    # the engine's CPU options (engine/runtime.py): no SkipLayerNormalization fusion
    session = ort.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=["SkipLayerNormFusion"]
    )
    top_k = 2 * beam if beam > 1 else 1
    feeds, fetch = step_feeds(session, config, rows, rows // beam, 15, 10, top_k, np.random.default_rng(0))
    for _ in range(steps):
        session.run(fetch, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    per_op: collections.Counter = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            per_op[event["args"]["op_name"]] += event["dur"] / steps  # microseconds per step
    return dict(per_op.most_common())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_engine", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", required=True, help="corpus folder with <split>.<src>")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--bundle", type=Path, default=ROOT / "model_repository" / "de-en" / "1")
    parser.add_argument("--variant", default="int8")
    parser.add_argument("--beam", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 1])
    parser.add_argument("--batch1-limit", type=int, default=200, help="sentences translated one at a time")
    parser.add_argument(
        "--rows", type=int, nargs="*", default=[32, 128], help="rows of the profiled step (none: no operator profile)"
    )
    parser.add_argument(
        "--live", action="store_true", help="also split the same batches decoded by a live batch (continuous batching)"
    )
    parser.add_argument(
        "--flow",
        action="store_true",
        help="split whole batches against a steady flow through a live decode, the test set in arrival order",
    )
    parser.add_argument("--repeats", type=int, default=1, help="passes of each row, the decodes interleaved")
    args = parser.parse_args(argv)
    manifest = json.loads((args.bundle / "manifest.json").read_text())
    sources = (Path(args.data) / f"{args.split}.{manifest['source_language']}").read_text().splitlines()

    decodes = ["whole", "flow"] if args.flow else ["whole", "live"] if args.live else ["whole"]
    order = "in arrival order" if args.flow else "sorted by length"
    print(f"CPU seconds, {args.variant}, {args.split} {order} (batch 1: the first {args.batch1_limit} sentences)")
    print("| search | batch | decode | total | encoder | decoder_step | cache reorder | other (Python) | repeats |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    for beam in args.beam:
        for batch in args.batch:
            chosen = sources if batch > 1 else sources[: args.batch1_limit]
            runs: dict[str, list[dict[str, float]]] = {d: [] for d in decodes}
            for r in range(args.repeats):
                for decode in decodes if r % 2 == 0 else decodes[::-1]:
                    runs[decode].append(
                        split(args.bundle, args.variant, chosen, beam, batch, decode=decode, by_length=not args.flow)
                    )
            for decode, times in runs.items():
                t = sorted(times, key=lambda x: x["total"])[len(times) // 2]  # the median pass
                cells = " | ".join(f"{t[k]:.3f} ({100 * t[k] / t['total']:.0f}%)" for k in list(t)[1:])
                each = " / ".join(f"{x['total']:.3f}" for x in times)
                print(f"| beam {beam} | {batch} | {decode} | {t['total']:.3f} | {cells} | {each} |")

    step_graph = args.bundle / manifest["variants"][args.variant]["decoder_step"]
    for rows in args.rows:
        beam = 4 if rows > 32 else 1
        per_op = operators(step_graph, manifest["model"], rows, beam)
        total = sum(per_op.values())
        print(
            f"\n{step_graph.relative_to(ROOT) if step_graph.is_relative_to(ROOT) else step_graph}: {rows} rows "
            f"(beam {beam}), {total:.0f} us of kernels per step"
        )
        print("| operator | us / step | share |")
        print("|---|---:|---:|")
        for op, us in per_op.items():
            if us / total >= 0.005:
                print(f"| {op} | {us:.0f} | {100 * us / total:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
