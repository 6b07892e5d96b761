"""Sentences translated by several bundles of one direction side by side, through the engine as the service runs
them (int8, beam 4 by default), as a markdown table: the model card's side-by-side sentences.

    .venv/bin/python scripts/side_by_side.py model_repository/de-en/2 model_repository/de-en/3
    .venv/bin/python scripts/side_by_side.py model_repository/zh-en/1 model_repository/zh-en/2 \
        --extra runs/data/general/news-zh.val.zh --extra-count 5

The sentences: the general-domain issue's own examples for the bundles' source language (issue 28: what the
caption and phrasebook models got wrong), then ``--extra-count`` lines of ``--extra`` (a held-out split), if given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from core.bundle import load_bundle
from service.engine import Engine, TranslateOptions
from service.engine.engine import SourceTooLongError

EXAMPLES = {
    "de": [
        "Hallo.",
        "Guten Morgen!",
        "Danke schön.",
        "Die Regierung hat neue Steuern angekündigt.",
        "Ich habe gestern ein Buch über Geschichte gelesen, das sehr spannend war.",
    ],
    "zh": ["政府宣布了新的税收政策。", "今天天气很好。"],
}


def translate(bundle_dir: Path, sentences: list[str], variant: str, beam: int) -> list[str]:
    bundle = load_bundle(bundle_dir)
    engine = Engine(bundle, variant=variant if variant in bundle.variants else bundle.default_variant, providers="cpu")
    options = TranslateOptions(beam_size=beam)
    try:
        return [t.text for t in engine.translate(sentences, options)]
    except SourceTooLongError:  # say which, translate the others
        out = []
        for sentence in sentences:
            try:
                out.append(engine.translate([sentence], options)[0].text)
            except SourceTooLongError:
                out.append(f"(over this model's {engine.max_source_tokens} source tokens)")
        return out


def table(bundles: list[Path], sentences: list[str], columns: list[list[str]]) -> str:
    names = [f"{b.parent.name} v{b.name}" for b in bundles]
    lines = ["| source | " + " | ".join(names) + " |", "|---" * (len(bundles) + 1) + "|"]
    for i, sentence in enumerate(sentences):
        cells = [column[i].replace("|", "\\|") for column in columns]
        lines.append(f"| {sentence.replace('|', chr(92) + '|')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", nargs="+", type=Path, help="bundle folders of one source language")
    parser.add_argument("--variant", default="int8")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--extra", type=Path, help="a file of source sentences, one per line")
    parser.add_argument("--extra-count", type=int, default=5)
    args = parser.parse_args(argv)
    languages = {load_bundle(b).manifest["source_language"] for b in args.bundles}
    if len(languages) != 1:
        parser.error(f"the bundles translate from different languages: {sorted(languages)}")
    sentences = list(EXAMPLES.get(languages.pop(), []))
    if args.extra:
        lines = [line.strip() for line in args.extra.read_text(encoding="utf-8").splitlines() if line.strip()]
        sentences += lines[: args.extra_count]
    columns = [translate(b, sentences, args.variant, args.beam) for b in args.bundles]
    print(table(args.bundles, sentences, columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
