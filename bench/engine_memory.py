"""Peak resident memory of one process serving several models, with the onnxruntime sessions on the process's one
shared CPU arena (engine/runtime.py, the default) against an arena of their own each.

    python -m bench.engine_memory \
        --model model_repository/de-en/2=../shared/data/multi30k/test_2016_flickr.de \
        --model model_repository/zh-en/1=../shared/data/tatoeba-cmn-eng/cmn.txt:1 \
        [--variant int8] [--beam 4] [--batch 32] [--limit 1000] [--repeats 2]

``--model BUNDLE=FILE[:COLUMN]``: the bundle and the sentences it translates, one per line (COLUMN: the 0-based
tab-separated column, as in Tatoeba's files). ``--limit`` sentences are taken evenly spaced through the file, then
translated in batches sorted by length, as bench/engine.py does. Every repeat of every arena mode runs in a fresh
process (peak RSS is a process's own: /proc's VmHWM), the modes interleaved; the table gives the median peak after
loading and after each model's pass, and the process's CPU seconds for the passes.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

MODES = {"shared arena": True, "own arenas": False}


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def read_sentences(spec: str, limit: int) -> list[str]:
    """``FILE[:COLUMN]`` -> ``limit`` non-empty sentences evenly spaced through the file."""
    path, column = spec, None
    head, _, tail = spec.rpartition(":")
    if head and tail.isdigit():
        path, column = head, int(tail)
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    if column is not None:
        lines = [line.split("\t")[column] for line in lines]
    step = max(1, len(lines) // limit)
    return lines[::step][:limit]


def _worker(conn, models: list[tuple[str, list[str]]], variant: str, beam: int, batch: int, shared: bool) -> None:
    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions

    engines = [(Engine(load_bundle(b), variant, "cpu", shared_arena=shared), texts) for b, texts in models]
    peaks, cpu = [peak_rss_mib()], time.process_time()
    for engine, texts in engines:
        ids = engine.source_ids(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), batch):
            engine.translate_ids([ids[i] for i in order[start : start + batch]], TranslateOptions(beam_size=beam))
        peaks.append(peak_rss_mib())
    conn.send({"peaks": peaks, "cpu": time.process_time() - cpu})


def in_fresh_process(worker, *args) -> dict:
    """What ``worker(connection, *args)`` sends back, run in a new (spawned) interpreter so that its peak RSS is
    its own."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=worker, args=(child, *args))
    process.start()
    result = parent.recv()
    process.join()
    return result


def measure(models: list[tuple[str, list[str]]], variant: str, beam: int, batch: int, shared: bool) -> dict:
    """One fresh process: peak RSS after loading and after each model's pass, CPU seconds of the passes."""
    return in_fresh_process(_worker, models, variant, beam, batch, shared)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.engine_memory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", action="append", required=True, metavar="BUNDLE=FILE[:COLUMN]")
    parser.add_argument("--variant", default="int8")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    models = []
    for spec in args.model:
        bundle, sep, text_spec = spec.partition("=")
        if not sep:
            parser.error(f"--model {spec!r}: expected BUNDLE=FILE[:COLUMN]")
        models.append((bundle, read_sentences(text_spec, args.limit)))
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for r in range(args.repeats):
        for mode, shared in MODES.items():
            runs[mode].append(measure(models, args.variant, args.beam, args.batch, shared))
            print(f"repeat {r + 1}, {mode}: peaks {[round(p) for p in runs[mode][-1]['peaks']]} MiB", file=sys.stderr)
    names = [Path(b).parent.name + "/" + Path(b).name for b, _ in models]
    print(f"{args.variant}, beam {args.beam}, batch {args.batch}, {args.limit} sentences per model,", end=" ")
    print(f"median of {args.repeats} processes per mode")
    after = " | ".join(f"after {n} MiB" for n in names)
    print(f"| arenas | peak RSS loaded MiB | {after} | CPU s | CPU s, each repeat |")
    print("|---|---:|" + "---:|" * len(names) + "---:|---|")
    medians = {}
    for mode, results in runs.items():
        peaks = [statistics.median(r["peaks"][i] for r in results) for i in range(len(models) + 1)]
        medians[mode] = peaks[-1]
        cpu = statistics.median(r["cpu"] for r in results)
        each = " / ".join(f"{r['cpu']:.2f}" for r in results)
        print(f"| {mode} | " + " | ".join(f"{p:.0f}" for p in peaks) + f" | {cpu:.2f} | {each} |")
    print(f"final peak, shared / own: {medians['shared arena'] / medians['own arenas']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
