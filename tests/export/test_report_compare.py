"""``export.cli compare``: two evaluation reports side by side, and the exit status the release's shortlist check
reads (1 when the candidate loses more than --max-loss BLEU anywhere)."""

from __future__ import annotations

import json

import pytest

from export.cli import main
from export.report_compare import compare, within


def _report(scores: dict[tuple[str, str], float]) -> dict:
    report: dict = {}
    for (split, beam), bleu in scores.items():
        report.setdefault("int8", {}).setdefault(split, {"split": split})[beam] = {"bleu": bleu}
    return report


BASE = _report({("news", "beam1"): 20.0, ("news", "beam4"): 21.0, ("tatoeba", "beam1"): 40.0})


@pytest.mark.parametrize(
    "candidate, ok",
    [
        (_report({("news", "beam1"): 20.1, ("news", "beam4"): 20.8, ("tatoeba", "beam1"): 40.0}), True),  # -0.2
        (_report({("news", "beam1"): 20.5, ("news", "beam4"): 21.5, ("tatoeba", "beam1"): 39.7}), False),  # -0.3
    ],
)
def test_the_exit_status_says_whether_every_row_is_within_the_loss(tmp_path, capsys, candidate, ok):
    base, cand = tmp_path / "base.json", tmp_path / "cand.json"
    base.write_text(json.dumps(BASE))
    cand.write_text(json.dumps(candidate))
    assert main(["compare", "--base", str(base), "--candidate", str(cand), "--max-loss", "0.2"]) == (0 if ok else 1)
    out = capsys.readouterr().out
    assert out.count("\n| int8 |") == 3 and ("**over**" in out) == (not ok)


def test_rows_only_where_both_reports_score():
    rows = compare(BASE, _report({("news", "beam1"): 19.0}))
    assert [(r["split"], r["beam"], r["delta"]) for r in rows] == [("news", "beam1", -1.0)]
    assert not within(rows, 0.2)
    with pytest.raises(ValueError, match="share no"):
        compare(BASE, _report({("other", "beam1"): 1.0}))
