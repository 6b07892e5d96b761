"""export/language_check.py: the language_mismatch rule measured on a split's own text (false alarms) and on text in
other languages (hits), at every threshold, with the rule the service applies (service/serving/quality.py)."""

from __future__ import annotations

import json

from core.language import MISMATCH_MIN_CONFIDENCE, is_mismatch
from export.language_check import THRESHOLDS, main

GERMAN = [
    "Die Regierung hat neue Steuern angekündigt.",
    "Ich habe gestern ein Buch über Geschichte gelesen, das sehr spannend war.",
    "Der Zug nach Berlin fährt heute später ab.",
]
ENGLISH = [
    "The government has announced new taxes.",
    "Yesterday I read a book about history that was very exciting.",
    "The train to Berlin leaves later today.",
]
CHINESE = ["政府宣布了新的税收政策。", "今天天气很好。", "我昨天读了一本关于历史的书。"]


def test_rule():
    assert is_mismatch(("en", 0.9), "de", 0.6) and not is_mismatch(("en", 0.5), "de", 0.6)
    assert not is_mismatch(("de", 1.0), "de", 0.6) and not is_mismatch(None, "de", 0.0)


def test_report(tmp_path):
    (tmp_path / "val.de").write_text("\n".join(GERMAN) + "\n")
    (tmp_path / "val.en").write_text("\n".join(ENGLISH) + "\n")
    (tmp_path / "zval.zh").write_text("\n".join(CHINESE) + "\n")
    (tmp_path / "zval.en").write_text("\n".join(ENGLISH) + "\n")
    out = tmp_path / "report.json"
    args = ["--data", str(tmp_path), "--source", "de", "--split", "val", "--other", "zh:zval", "--output", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert report["served_threshold"] == MISMATCH_MIN_CONFIDENCE
    keys = {f"{t:.2f}" for t in THRESHOLDS}
    assert report["false_alarms"]["val"] == {"texts": 3, **{k: 0.0 for k in keys}}  # German is German
    assert report["hits"]["zh:zval"] == {"texts": 3, **{k: 1.0 for k in keys}}  # Chinese is never German
    assert report["hits"]["en:val"]["texts"] == 3 and report["hits"]["en:val"]["0.50"] == 1.0
