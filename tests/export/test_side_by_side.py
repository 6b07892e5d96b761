"""scripts/side_by_side.py: the model card's side-by-side sentences, through the engine as the service runs them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "side_by_side.py"


def _script():
    spec = importlib.util.spec_from_file_location("side_by_side", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bundles_of_one_language_side_by_side(tiny_bundle_dir, tmp_path, capsys):
    script = _script()
    extra = tmp_path / "extra.de"
    extra.write_text("ein mann spielt\n\nder hund rennt im park\neine frau sitzt\n", encoding="utf-8")
    assert script.main([str(tiny_bundle_dir), str(tiny_bundle_dir), "--extra", str(extra), "--extra-count", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| source | de-en v1 | de-en v1 |"
    rows = lines[2:]
    assert [r.split(" | ")[0][2:] for r in rows] == [
        *script.EXAMPLES["de"],
        "ein mann spielt",
        "der hund rennt im park",
    ]
    assert all(r.count(" | ") == 2 for r in rows)  # source and two translations, the same model twice
    assert all(r.split(" | ")[1] == r.split(" | ")[2][:-2] for r in rows)


def test_bundles_of_different_languages_are_refused(tiny_bundle_dir, tmp_path):
    import json
    import shutil

    other = tmp_path / "zh-en" / "1"
    shutil.copytree(tiny_bundle_dir, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["source_language"] = "zh"
    (other / "manifest.json").write_text(json.dumps(manifest))
    script = _script()
    script.load_bundle = lambda path, **_: type(
        "B", (), {"manifest": json.loads((Path(path) / "manifest.json").read_text())}
    )()
    with pytest.raises(SystemExit):
        script.main([str(tiny_bundle_dir), str(other)])
