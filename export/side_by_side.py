"""Translations of a fixed list of sentences by several bundles, side by side, as a Markdown table.

    python -m export.side_by_side --sentences configs/eval/side_by_side.json --language de \
        --bundle model_repository/de-en/2 --bundle model_repository/de-en/3 [--beam 4] [--variant int8]

Each bundle translates through the engine the service runs (its default variant unless ``--variant``), beam 4
by default, one sentence per call as a user's request would be. The model card shows the table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions


def translations(bundle_dir: str, sentences: list[str], beam: int, variant: str | None) -> list[str]:
    bundle = load_bundle(bundle_dir)
    engine = Engine(bundle, variant=variant, intra_op_threads=1)  # None: the bundle's default variant
    return [engine.translate([s], TranslateOptions(beam_size=beam))[0].text for s in sentences]


def table(kinds: list[str], sentences: list[str], columns: dict[str, list[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = [
        "| kind | source | " + " | ".join(columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for i, (kind, source) in enumerate(zip(kinds, sentences, strict=True)):
        rows.append(f"| {kind} | {cell(source)} | " + " | ".join(cell(c[i]) for c in columns.values()) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.side_by_side", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", required=True, help='JSON: {"de": [[kind, sentence], ...], "zh": ...}')
    parser.add_argument("--language", required=True, help="which list of the file")
    parser.add_argument("--bundle", action="append", required=True, help="bundle folder, repeatable (one column)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--variant", help="variant to run (default: each bundle's default)")
    args = parser.parse_args(argv)

    entries = json.loads(Path(args.sentences).read_text(encoding="utf-8"))[args.language]
    kinds, sentences = [k for k, _ in entries], [s for _, s in entries]
    columns = {}
    for bundle_dir in args.bundle:
        manifest = load_bundle(bundle_dir).manifest
        columns[f"{manifest['name']} v{manifest['version']}"] = translations(
            bundle_dir, sentences, args.beam, args.variant
        )
    print(table(kinds, sentences, columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
