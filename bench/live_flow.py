"""The live decode's steady flow, bundle against bundle: CPU time per flow, interleaved, and whether they agree.

    python -m bench.live_flow --data ../shared/data/multi30k --bundles <A> <B> [--variant int8] [--beam 4] \
        [--batch 32] [--repeats 3]

The test set, in its own order (as requests arrive), decoded through one live decode (engine/live.py, what
continuous batching runs) that holds --batch sentences, a waiting one joining at the step after one finishes: the
flow of bench/profile_engine.py --flow. Every bundle's engine (one thread) runs one warm-up flow, then --repeats
timed flows, interleaved (repeat r of every bundle before repeat r + 1), and the median is reported with each
repeat; "same answers" counts the sentences whose token ids equal the first bundle's. Meant for A/B runs of two
builds of one model, e.g. a bundle as released and the same bundle after ``python -m export.cli upgrade``
(export/upgrade.py): get the released one with ``git archive <commit> model_repository/de-en/3 | tar -x -C /tmp/a``.
No n-gram block (the search that bench.engine times).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench.harness import machine, now


def flow(engine, ids: list[list[int]], options, batch: int) -> dict[int, list[int]]:
    """Token ids by sentence index, every sentence through one live decode holding at most ``batch``."""
    from engine.live import LiveBatch

    state, waiting, out = LiveBatch(engine), list(enumerate(ids))[::-1], {}
    while waiting or len(state):
        joining = [waiting.pop() for _ in range(min(batch - len(state), len(waiting)))]
        if joining:
            state.add([(i, source, options, False) for i, source in joining])
        for key, result in state.step().finished:
            out[key] = result.token_ids
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.live_flow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", required=True, help="corpus folder with <split>.<source language>")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--bundles", type=Path, nargs="+", required=True, help="the first is the reference")
    parser.add_argument("--variant", default="int8")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32, help="sentences the live decode holds")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions

    engines = [Engine(load_bundle(b), args.variant, "cpu", intra_op_threads=1) for b in args.bundles]
    language = engines[0].bundle.manifest["source_language"]
    texts = (Path(args.data) / f"{args.split}.{language}").read_text(encoding="utf-8").splitlines()
    ids = engines[0].source_ids(texts)
    options = [e.resolved(TranslateOptions(beam_size=args.beam, no_repeat_ngram_size=0)) for e in engines]
    answers = [flow(e, ids, o, args.batch) for e, o in zip(engines, options, strict=True)]  # warm-up
    times: list[list[float]] = [[] for _ in engines]
    for _ in range(args.repeats):
        for k, engine in enumerate(engines):
            started = time.process_time()
            answers[k] = flow(engine, ids, options[k], args.batch)
            times[k].append(time.process_time() - started)
    base = float(np.median(times[0]))
    print(f"{now()} on {machine()}")
    print(
        f"{len(ids)} {args.split} sentences through one live decode holding {args.batch}, {args.variant}, "
        f"beam {args.beam}, one thread; CPU s per flow"
    )
    print("| bundle | median | repeats | x first | same answers |")
    print("|---|---:|---|---:|---:|")
    for bundle, ts, got in zip(args.bundles, times, answers, strict=True):
        median = float(np.median(ts))
        same = sum(got[i] == answers[0][i] for i in answers[0])
        each = " / ".join(f"{t:.2f}" for t in ts)
        print(f"| {bundle} | {median:.2f} | {each} | {median / base:.2f}x | {same} / {len(ids)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
