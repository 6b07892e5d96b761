"""export/report_tables.py: the markdown tables of an evaluate report, with the replaced model's row beside."""

from __future__ import annotations

import json

import pytest

from export.cli import main
from export.report_tables import scores, variants


def _result(bleu: float, loops: int, n: int = 10) -> dict:
    return {"bleu": bleu, "chrf": bleu + 20, "loops": loops, "n_sentences": n}


REPORT = {
    "int8": {
        "news.val": {"split": "news.val", "beam1": _result(15.0, 2, 3000), "beam4": _result(16.25, 0, 3000)},
        "m30k.test": {"split": "m30k.test", "beam1": _result(40.0, 0), "beam4": _result(41.5, 0)},
    },
    "fp32": {"news.val": {"split": "news.val", "beam1": _result(15.5, 1), "beam4": _result(16.5, 0)}},
}
BASELINE = {"int8": {"news.val": {"beam1": _result(1.88, 623), "beam4": _result(1.76, 317)}}}


def test_scores_rows_hold_each_beam_and_the_baseline_beside():
    lines = scores(REPORT, "int8", BASELINE).splitlines()
    assert lines[0].startswith("| split | sentences | BLEU greedy / beam 4 |") and "BLEU before" in lines[0]
    assert lines[2] == ("| news.val | 3,000 | 15.00 / 16.25 | 35.00 / 36.25 | 2 / 0 | 1.88 / 1.76 | 623 / 317 |")
    assert lines[3].endswith("| - / - | - / - |")  # no baseline score on that split
    assert "before" not in scores(REPORT, "int8").splitlines()[0]
    with pytest.raises(ValueError, match="no fp16 scores"):
        scores(REPORT, "fp16")


def test_variants_table_has_a_column_per_variant_and_marks_missing_splits():
    lines = variants(REPORT).splitlines()
    assert lines[0] == "| split (greedy / beam 4) | int8 | fp32 |"
    assert lines[2] == "| news.val | 15.00 / 16.25 | 15.50 / 16.50 |"
    assert lines[3] == "| m30k.test | 40.00 / 41.50 | - / - |"


def test_cli_prints_both_tables(tmp_path, capsys):
    report, baseline = tmp_path / "r.json", tmp_path / "b.json"
    report.write_text(json.dumps(REPORT))
    baseline.write_text(json.dumps(BASELINE))
    assert main(["tables", "--report", str(report), "--baseline", str(baseline)]) == 0
    out = capsys.readouterr().out
    assert "| news.val | 3,000 | 15.00 / 16.25 |" in out and "| split (greedy / beam 4) | int8 | fp32 |" in out
