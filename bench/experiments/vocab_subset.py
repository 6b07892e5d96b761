"""Per-step CPU time of a bundle's step graph over the whole vocabulary vs a vocabulary subset (issue 33).

    python -m bench.experiments.vocab_subset --bundle model_repository/de-en/2 --variants fp32 int8

Rewrites the bundle's ``decoder_step`` graph with export/vocab_subset.py into a temporary folder next to copies of its
weights files, checks that an empty ``vocab_ids`` gives the original outputs bit for bit and a subset the original
log-probabilities renormalized over it, then times (process CPU time, best of 5 x 100 steps, so that a busy machine
counts less) the original graph, the rewritten one fed an empty subset, and the rewritten one fed random subsets.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from export.vocab_subset import add_vocab_subset
from service.engine.runtime import create_session
from service.engine.step_inputs import uniform_inputs

FETCH = ["log_probs", "top_log_probs", "top_ids"]


def cpu_us(session, feeds: dict, steps: int = 100, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(steps):
            session.run(FETCH[1:], feeds)
        best = min(best, (time.process_time() - started) / steps * 1e6)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--variants", nargs="+", default=["fp32", "int8"])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--subsets", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--past", type=int, default=10)
    args = parser.parse_args(argv)
    bundle = Path(args.bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    cfg = manifest["model"]
    layers, heads, vocab = cfg["n_decoder_layers"], cfg["n_heads"], cfg["vocab_size"]
    d_head = cfg["d_model"] // heads
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for variant in args.variants:
            entry = manifest["variants"][variant]
            for rel in entry.get("weights", []):
                if not (work / Path(rel).name).exists():
                    shutil.copy(bundle / rel, work / Path(rel).name)
            model = onnx.load(str(bundle / entry["decoder_step"]), load_external_data=False)
            onnx.save(model, str(work / f"{variant}.original.onnx"))
            onnx.save(add_vocab_subset(model), str(work / f"{variant}.subset.onnx"))
            original = create_session(work / f"{variant}.original.onnx", "cpu")
            rewritten = create_session(work / f"{variant}.subset.onnx", "cpu")
            for rows in args.rows:
                feeds = {"tokens": rng.integers(4, vocab, (rows, 1)), "src_mask": np.ones((rows, 12), bool)}
                feeds.update(top_k=np.array([4]), **uniform_inputs(rows, rows, args.past))
                for i in range(layers):
                    for name, length in (("cross_keys", 12), ("cross_values", 12)):
                        feeds[f"{name}_{i}"] = rng.standard_normal((rows, heads, length, d_head), dtype=np.float32)
                    for name in ("past_keys", "past_values"):
                        feeds[f"{name}_{i}"] = rng.standard_normal((rows, heads, args.past, d_head), dtype=np.float32)
                empty = {**feeds, "vocab_ids": np.zeros(0, np.int64)}
                want, got = original.run(FETCH, feeds), rewritten.run(FETCH, empty)
                assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True)), "empty subset differs"
                line = f"{variant} rows {rows:3d}: original {cpu_us(original, feeds):6.0f} us, "
                line += f"rewritten+empty {cpu_us(rewritten, empty):6.0f} us"
                for size in args.subsets:
                    ids = np.sort(rng.choice(vocab, size, replace=False)).astype(np.int64)
                    subset = {**feeds, "vocab_ids": ids}
                    log_probs = rewritten.run(FETCH[:1], subset)[0]
                    part = want[0][:, ids]
                    renormalized = part - np.log(np.exp(part).sum(axis=1, keepdims=True))
                    assert np.abs(log_probs - renormalized).max() < 1e-4, "subset log-probabilities differ"
                    line += f", subset {size} {cpu_us(rewritten, subset):6.0f} us"
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
