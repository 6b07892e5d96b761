"""export/side_by_side.py: one column per bundle, one row per sentence, translations as the engine gives them."""

from __future__ import annotations

import json

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from export.side_by_side import main


def test_side_by_side_table_has_a_column_per_bundle_and_the_engines_translations(tiny_bundle_dir, tmp_path, capsys):
    sentences = tmp_path / "s.json"
    entries = [["toy", "der mann | spielt"], ["toy", "ein hund rennt"]]
    sentences.write_text(json.dumps({"de": entries, "zh": []}), encoding="utf-8")
    args = ["--sentences", str(sentences), "--language", "de", "--bundle", str(tiny_bundle_dir), "--beam", "2"]
    assert main(args + ["--bundle", str(tiny_bundle_dir), "--variant", "fp32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + len(entries) and lines[0].count("de-en v1") == 1  # a repeated bundle: one column
    engine = Engine(load_bundle(tiny_bundle_dir), variant="fp32")
    expected = engine.translate(["ein hund rennt"], TranslateOptions(beam_size=2))[0].text
    assert lines[3] == f"| toy | ein hund rennt | {expected} |"
    assert "der mann \\| spielt" in lines[2]  # a pipe in a sentence does not break the table
