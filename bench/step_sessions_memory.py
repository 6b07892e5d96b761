"""Resident memory of an engine with one step session against two (a bundle with both step graphs, core/graphs.py
STEP_GRAPHS: whole-batch search's and the live decode's, whose session the engine creates on first use).

    python -m bench.step_sessions_memory --bundle model_repository/de-en/2 [--variant int8] [--repeats 3]

Each repeat runs in a fresh process: the engine translates a few sentences as whole batches (RSS "one step
session"), then runs them through the live decode, which creates the second session where the bundle has one (RSS
"two step sessions"). RSS is /proc's VmRSS after each stage; the table gives medians and the difference. A bundle of
one step graph shows the cost of the live decode's state alone (its difference is the baseline).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench.engine_memory import in_fresh_process

TEXTS = ["ein kind rennt im park", "eine kleine rote katze sitzt unter dem blauen ball", "der hund spielt"]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


def _worker(conn, bundle: str, variant: str) -> None:
    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions
    from engine.live import LiveBatch

    engine = Engine(load_bundle(bundle), variant=variant, providers="cpu")
    engine.translate(TEXTS, TranslateOptions(beam_size=4))
    one = rss_mib()
    live = LiveBatch(engine)
    live.add([(i, ids, TranslateOptions(beam_size=4), False) for i, ids in enumerate(engine.source_ids(TEXTS))])
    while len(live):
        live.step()
    engine.translate(TEXTS, TranslateOptions(beam_size=4))
    conn.send({"one": one, "two": rss_mib(), "sessions": 1 + (engine.live_step is not engine.step_decoder)})


def measure(bundle: str, variant: str) -> dict:
    return in_fresh_process(_worker, bundle, variant)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.step_sessions_memory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bundle", nargs="+", required=True)
    parser.add_argument("--variant", default="int8")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print("| bundle | step sessions | RSS MiB, whole batches | RSS MiB, + live decode | difference |")
    print("|---|---:|---:|---:|---:|")
    for bundle in args.bundle:
        runs = [measure(bundle, args.variant) for _ in range(args.repeats)]
        one, two = (statistics.median(r[key] for r in runs) for key in ("one", "two"))
        print(f"| {bundle} | {runs[0]['sessions']} | {one:.1f} | {two:.1f} | {two - one:+.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
