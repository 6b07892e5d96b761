"""``python -m export.foreign_words``: how often a bundle's Chinese translations write Latin-script words, through the
engine (int8, the bundle's decoding defaults, a pivot through both legs): those the source lacks (the service's
``foreign_words`` warning, core/language.py ``uncopied_latin``: German words leaked into English->Chinese) and any at
all (English words left untranslated too). The measurement of multi 1's known defect and of the data against it
(docs/models-round3.md):

    python -m export.foreign_words --bundle model_repository/multi/1 \\
        --input ../shared/data/multi30k/test_2016_flickr.en --direction en-zh
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from core.directions import DirectionError
from core.language import latin_words, uncopied_latin
from engine.decoding import TranslateOptions
from export.direction_scoring import engine_in_direction, translate_split
from model.data import read_lines

EXAMPLES = 5  # translations with foreign words shown in the report


def count(sources: list[str], translations: list[str]) -> dict[str, object]:
    """The report's counts of translations (into Chinese) of ``sources``."""
    foreign = [(s, t, uncopied_latin(t, s)) for s, t in zip(sources, translations, strict=True)]
    flagged = [(s, t, words) for s, t, words in foreign if words]
    any_latin = sum(bool(latin_words(t)) for t in translations)
    return {
        "texts": len(sources),
        "foreign_words": len(flagged),
        "foreign_share": round(len(flagged) / max(len(sources), 1), 4),
        "any_latin": any_latin,
        "any_latin_share": round(any_latin / max(len(sources), 1), 4),
        "examples": [{"source": s, "translation": t, "words": w} for s, t, w in flagged[:EXAMPLES]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.foreign_words", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--input", required=True, help="source text, one sentence a line")
    parser.add_argument("--direction", default="en-zh", help="a direction into Chinese that the bundle serves")
    parser.add_argument("--variant", default="int8")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--limit", type=int, default=0, help="only the first N lines (0 = all)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", help="write the report (JSON) here too")
    args = parser.parse_args(argv)
    if not args.direction.endswith("-zh"):
        print(f"--direction: {args.direction} is not into Chinese", file=sys.stderr)
        return 2
    try:
        engine, direction = engine_in_direction(args.bundle, args.direction, args.variant, args.threads)
    except DirectionError as exc:
        print(f"--direction: {exc}", file=sys.stderr)
        return 2
    sources = read_lines(args.input)
    sources = sources[: args.limit] if args.limit else sources
    started = time.time()
    translations = translate_split(
        engine, direction, sources, engine.resolved(TranslateOptions(beam_size=args.beam)), 32
    )[0]
    report = {
        "bundle": args.bundle,
        "direction": direction.name,
        "input": args.input,
        "beam": args.beam,
        **count(sources, translations),
        "seconds": round(time.time() - started, 1),
    }
    text = json.dumps(report, ensure_ascii=False, indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
