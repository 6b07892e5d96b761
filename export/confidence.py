"""Fit a bundle's confidence map on a validation split and store it in the manifest (re-sealed).

    python -m export.confidence --bundle model_repository/de-en/1 --data ../shared/data/multi30k \\
        --fit-split val --test-split test_2016_flickr

Each validation sentence is translated by the engine (default variant, beam 4 as the API's default); the
label is sentence chrF >= --threshold against its reference; a logistic regression on the mean log-probability
per token (core/confidence.py) is fitted by Newton's method. Reported on the test split: expected calibration
error (10 equal-width bins), Brier score, and the base rate for comparison.

A multilingual bundle has a map per direction (``--direction``, default its own pair; sources tagged as the service
tags them): the own pair's is the manifest's ``confidence``, another's ``direction_confidence[<direction>]``, which
service/serving/directions.py ``Routed`` answers with. A direction served by pivot has none (its answer's score is
the second leg's alone, blind to the first leg's errors).

    python -m export.confidence --bundle model_repository/multi/1 --data runs/data/multi6 --direction zh-en \
        --fit-split tatoeba-zh.val wiki-zh.val tico-zh.val --test-split tatoeba-zh.test wiki-zh.test tico-zh.test
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import sacrebleu

from core.bundle import load_bundle
from core.confidence import confidence_of, mean_log_prob
from core.directions import DirectionError, tag_ids
from core.tokenizer import EOS_ID
from engine import Engine
from engine.decoding import TranslateOptions
from export.direction_scoring import direction_named
from export.manifest import seal


def fit_logistic(x: np.ndarray, y: np.ndarray, steps: int = 50, l2: float = 1e-3) -> tuple[float, float]:
    """(a, b) maximizing the likelihood of y ~ sigmoid(a x + b), a little L2 on a; Newton-Raphson."""
    w = np.zeros(2)
    features = np.stack([x, np.ones_like(x)], axis=1)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(features @ w)))
        gradient = features.T @ (p - y) + l2 * np.array([w[0], 0.0])
        hessian = features.T @ (features * (p * (1 - p))[:, None]) + l2 * np.diag([1.0, 0.0])
        step = np.linalg.solve(hessian + 1e-9 * np.eye(2), gradient)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1])


def calibration_error(probabilities: np.ndarray, labels: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error: |mean confidence - accuracy| per equal-width bin, weighted by bin size."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(probabilities, edges[1:-1]), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        chosen = which == b
        if chosen.any():
            total += chosen.mean() * abs(probabilities[chosen].mean() - labels[chosen].mean())
    return float(total)


def features_and_labels(
    engine: Engine, sources: list[list[int]], references: list[str], threshold: float, beam: int, batch: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """``sources``: subword ids + EOS of each source (Engine.source_ids)."""
    xs, ys = [], []
    for start in range(0, len(sources), batch):
        chunk = engine.translate_ids(sources[start : start + batch], TranslateOptions(beam_size=beam))
        for t, ref in zip(chunk, references[start : start + batch], strict=True):
            xs.append(mean_log_prob(t.score, len(t.token_ids)))
            ys.append(float(sacrebleu.sentence_chrf(t.text, [ref]).score >= threshold))
    return np.array(xs), np.array(ys)


def main(argv: list[str] | None = None) -> int:
    from model.data import read_parallel, split_language

    parser = argparse.ArgumentParser(prog="python -m export.confidence", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--data", required=True, help="corpus folder with <split>.<lang> files")
    parser.add_argument("--fit-split", nargs="+", default=["val"], help="one or more splits, fitted as one")
    parser.add_argument("--test-split", nargs="+", default=["test_2016_flickr"], help="one or more splits")
    parser.add_argument("--threshold", type=float, default=50.0, help="chrF a 'good' translation reaches")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--limit", type=int, default=0, help="use only the first N sentences of each split")
    parser.add_argument("--direction", help="a direction of a multilingual bundle (default: its own pair)")
    parser.add_argument("--dry-run", action="store_true", help="report, do not write the manifest")
    args = parser.parse_args(argv)

    bundle = load_bundle(args.bundle)
    m = bundle.manifest
    try:
        direction, own = direction_named(m, args.direction)
    except DirectionError as exc:
        print(f"--direction: {exc}", file=sys.stderr)
        return 2
    if direction.pivot:
        print(f"--direction: {direction.name} is served by pivot through {direction.pivot}: no confidence map (its "
              "score is the second leg's alone)", file=sys.stderr)  # fmt: skip
        return 2
    engine = Engine(bundle)
    prefix = tag_ids(engine.tokenizer.encode, engine.tokenizer.sp.piece_to_id, direction.tag)
    data, skipped = {}, {}
    for role, splits in (("fit", args.fit_split), ("test", args.test_split)):
        sources, references = [], []
        for split in splits:  # several splits (a general model's domains) are scored as one
            language = split_language(args.data, split, direction.source, direction.target)
            src, ref = read_parallel(args.data, split, language, direction.target)
            if args.limit:
                src, ref = src[: args.limit], ref[: args.limit]
            sources, references = sources + src, references + ref
        # a source over the model's limit is refused by the service (422), so it has no confidence to fit
        ids = engine.tokenizer.encode_batch([engine.normalize_source(s) for s in sources])
        room = engine.max_source_tokens - len(prefix)  # with the tag and its EOS, within the model's positions
        fits = [len(seq) < room for seq in ids]
        skipped[role] = fits.count(False)
        kept = [([*prefix, *seq, EOS_ID], ref) for seq, ref, ok in zip(ids, references, fits, strict=True) if ok]
        data[role] = features_and_labels(
            engine, [seq for seq, _ in kept], [ref for _, ref in kept], args.threshold, args.beam
        )
    x, y = data["fit"]
    a, b = fit_logistic(x, y)
    params = {"a": round(a, 6), "b": round(b, 6)}
    tx, ty = data["test"]
    p = np.array([confidence_of(v, params) for v in tx])
    base = np.full_like(ty, y.mean())
    report = {
        **params,
        "feature": "mean log-probability per generated token, EOS included (core/confidence.py)",
        "target": f"sentence chrF >= {args.threshold} against the reference",
        "threshold_chrf": args.threshold,
        "direction": direction.name,
        "variant": engine.variant,
        "beam_size": args.beam,
        "fit": {
            "split": " + ".join(args.fit_split),
            "sentences": len(x),
            "positive_rate": round(float(y.mean()), 4),
            "over_the_source_limit": skipped["fit"],
        },
        "test": {
            "split": " + ".join(args.test_split),
            "sentences": len(tx),
            "over_the_source_limit": skipped["test"],
            "positive_rate": round(float(ty.mean()), 4),
            "ece": round(calibration_error(p, ty), 4),
            "brier": round(float(np.mean((p - ty) ** 2)), 4),
            "brier_base_rate": round(float(np.mean((base - ty) ** 2)), 4),
        },
    }
    print(json.dumps(report, indent=2))
    if not args.dry_run:
        manifest = dict(m)
        if own:
            manifest["confidence"] = report
        else:
            manifest["direction_confidence"] = {**manifest.get("direction_confidence", {}), direction.name: report}
        seal(Path(args.bundle), manifest)
        print(f"stored in {Path(args.bundle) / 'manifest.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
