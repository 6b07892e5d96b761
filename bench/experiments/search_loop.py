"""A lone sentence's search: the step-by-step Python loop against the bundle's search loop graph.

    python -m bench.experiments.search_loop --bundle model_repository/de-en/2 --data ../shared/data/multi30k \
        [--split test_2016_flickr] [--variant int8] [--beam 1 4] [--sentences 300] [--repeats 3]

Issue 33's third lever (docs/engine-speed-log.md item 24). ``Engine(search_loop=False)`` calls the whole-batch
step graph once per target token from Python (service/engine/search.py); ``Engine(search_loop=True)`` runs the
bundle's ``decoder_loop`` graph (export/search_loop.py), one session call per sentence. A bundle exported before
the loop graph existed is copied to a temporary folder and given one (``add_search_loops``, then sealed), which
reads the same weights files.

For each beam size it checks that both give the same hypotheses (tokens and scores) on every sentence, then prints
the CPU time per sentence of the decode alone (the encoder's outputs computed once beforehand: the same for both),
interleaved repeats, median.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from core.bundle import MANIFEST, load_bundle
from core.graphs import SEARCH_LOOP
from export.manifest import seal
from export.search_loop import add_search_loops
from service.engine import Engine, TranslateOptions

WAYS = ("step by step (Python)", "search loop graph")


def with_loops(bundle_dir: Path, work: Path) -> Path:
    """``bundle_dir`` itself when its variants carry search loop graphs, else a sealed copy in ``work`` with them."""
    manifest = json.loads((bundle_dir / MANIFEST).read_text(encoding="utf-8"))
    if any(SEARCH_LOOP in v for v in manifest["variants"].values()):
        return bundle_dir
    copy = work / bundle_dir.parent.name / bundle_dir.name
    shutil.copytree(bundle_dir, copy)
    manifest["variants"] = add_search_loops(copy, manifest["variants"])
    files = list(manifest["files"])
    files += [v[SEARCH_LOOP] for v in manifest["variants"].values() if SEARCH_LOOP in v]
    manifest["files"] = files
    manifest.pop("manifest_sha256", None)
    seal(copy, manifest)
    return copy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="corpus folder with <split>.<source language>")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--variant", default="int8")
    parser.add_argument("--beam", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as work:
        bundle = load_bundle(with_loops(args.bundle, Path(work)))
        engines = {
            WAYS[0]: Engine(bundle, args.variant, providers="cpu", search_loop=False),
            WAYS[1]: Engine(bundle, args.variant, providers="cpu"),
        }
        if engines[WAYS[1]].search_loop is None:
            print(f"{args.variant} of {args.bundle} has no search loop (float16, or step interface < 3)")
            return 2
        src = bundle.manifest["source_language"]
        lines = (args.data / f"{args.split}.{src}").read_text(encoding="utf-8").splitlines()[: args.sentences]
        sources = engines[WAYS[0]].source_ids(lines)
        encoded = [engines[WAYS[0]].run_encoder([s]) for s in sources]

        def decode(engine: Engine, options: TranslateOptions) -> list[list[tuple[list[int], float]]]:
            return [
                [(h.tokens, h.score) for h in engine._decode(enc, [source], options)[0]]
                for source, enc in zip(sources, encoded, strict=True)
            ]

        seconds: dict[tuple[int, str], list[float]] = {}
        differ = 0
        for beam in args.beam:
            options = TranslateOptions(beam_size=beam)
            answers = [decode(engine, options) for engine in engines.values()]
            wrong = sum(a != b for a, b in zip(*answers, strict=True))
            differ += wrong
            print(f"beam {beam}: {len(sources)} sentences of {args.split}, {args.variant}: {wrong} differ")
            for _ in range(args.repeats):
                for name, engine in engines.items():
                    started = time.process_time()
                    decode(engine, options)
                    seconds.setdefault((beam, name), []).append(time.process_time() - started)
    print(f"\nCPU ms per sentence, decode only, {bundle.manifest['name']} v{bundle.manifest['version']} {args.variant}")
    print("| search | decode | CPU ms / sentence (median) | repeats | speed-up |")
    print("|---|---|---:|---|---:|")
    for beam in args.beam:
        base = statistics.median(seconds[(beam, WAYS[0])])
        for name in WAYS:
            values = seconds[(beam, name)]
            median = statistics.median(values)
            repeats = " / ".join(f"{1000 * v / len(sources):.2f}" for v in values)
            search = "greedy" if beam == 1 else f"beam {beam}"
            print(f"| {search} | {name} | {1000 * median / len(sources):.3f} | {repeats} | {base / median:.2f}x |")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
