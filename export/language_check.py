"""``python -m export.language_check``: how often the language_mismatch warning (service/serving/quality.py) would
fire on a model's own validation text (false alarms) and on text in the wrong language (the English references of
the same splits, and the other languages' texts: hits), at several detector confidences. The service warns at
``MISMATCH_MIN_CONFIDENCE`` (core/language.py); this is the measurement to choose or confirm it on new data.

    python -m export.language_check --data runs/data/general --source de \\
        --split news-de.val tatoeba-de.val multi30k.val --other zh:news-zh.val --limit 1000
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tqdm import tqdm

from core.language import MISMATCH_MIN_CONFIDENCE, detect, is_mismatch
from model.data import read_parallel, split_language

THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def rates(found: list[tuple[str, float]], source: str) -> dict[str, float]:
    """Share of texts flagged at each threshold."""
    return {
        f"{t:.2f}": round(sum(is_mismatch(f, source, t) for f in found) / max(len(found), 1), 4) for t in THRESHOLDS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.language_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="corpus folder with <split>.<src> and <split>.<tgt>")
    parser.add_argument("--source", required=True, help="the model's source language, e.g. de")
    parser.add_argument("--target", default="en")
    parser.add_argument("--split", nargs="+", required=True, help="splits whose source side is the model's language")
    parser.add_argument("--other", nargs="*", default=[], help="LANG:SPLIT texts of another source language")
    parser.add_argument("--candidates", nargs="+", default=["de", "en", "zh"], help="MT_DETECT_LANGUAGES")
    parser.add_argument("--limit", type=int, default=1000, help="texts per split (the first N)")
    parser.add_argument("--output", help="write the report (JSON) here too")
    args = parser.parse_args(argv)
    languages = sorted({*args.candidates, args.source})

    def detected(texts: list[str], label: str) -> list[tuple[str, float]]:
        return [detect(t, languages) for t in tqdm(texts, desc=label, unit="text", file=sys.stderr)]

    started = time.time()
    report: dict[str, object] = {
        "source": args.source,
        "candidates": languages,
        "served_threshold": MISMATCH_MIN_CONFIDENCE,
        "false_alarms": {},
        "hits": {},
    }
    for split in args.split:
        language = split_language(args.data, split, args.source, args.target)
        sources, references = read_parallel(args.data, split, language, args.target)
        sources, references = sources[: args.limit], references[: args.limit]
        report["false_alarms"][split] = {"texts": len(sources), **rates(detected(sources, split), args.source)}
        report["hits"][f"{args.target}:{split}"] = {
            "texts": len(references),
            **rates(detected(references, f"{split} ({args.target})"), args.source),
        }
    for entry in args.other:
        language, split = entry.split(":", 1)
        texts, _ = read_parallel(args.data, split, split_language(args.data, split, language, args.target), args.target)
        texts = texts[: args.limit]
        report["hits"][entry] = {"texts": len(texts), **rates(detected(texts, entry), args.source)}
    report["seconds"] = round(time.time() - started, 1)
    text = json.dumps(report, indent=2)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
