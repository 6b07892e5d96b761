"""export/foreign_words.py: the share of a bundle's Chinese translations that write Latin-script words, counted on
given translations and measured end to end on the tiny multilingual bundle of tests/multi_bundle.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

from multi_bundle import LEXICON, NAME, cached_multi_bundle, sentence, source_digest

from export.foreign_words import count
from export.foreign_words import main as foreign_main


def test_counts_leaked_and_any_latin_words():
    sources = ["People repair the roof.", "I wrote it in Python.", "Two men play soccer.", "A dog runs."]
    translations = ["人 reparieren了屋顶。", "我用Python写的。", "两个男人在踢足球。", "一只 Hund在 running。"]
    report = count(sources, translations)
    assert report["texts"] == 4 and report["foreign_words"] == 2 and report["any_latin"] == 3
    assert report["foreign_share"] == 0.5 and report["any_latin_share"] == 0.75
    assert [e["words"] for e in report["examples"]] == [["reparieren"], ["Hund", "running"]]


def test_measures_a_bundles_translations_into_chinese(request, tmp_path, capsys):
    repository = cached_multi_bundle(Path(request.config.cache.mkdir("mtserve")), tmp_path, source_digest())
    bundle = str(repository / NAME / "1")
    rng = random.Random(5)
    english = [sentence([rng.randrange(len(LEXICON["en"])) for _ in range(rng.randint(2, 4))], "en") for _ in range(6)]
    (tmp_path / "in.en").write_text("\n".join(english) + "\n", encoding="utf-8")
    args = ["--bundle", bundle, "--input", str(tmp_path / "in.en"), "--variant", "fp32", "--beam", "2"]
    assert foreign_main([*args, "--output", str(tmp_path / "report.json")]) == 0
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["direction"] == "en-zh" and report["texts"] == 6
    assert 0 <= report["foreign_words"] <= report["any_latin"] <= 6
    capsys.readouterr()
    assert foreign_main([*args, "--direction", "zh-en"]) == 2  # not into Chinese
    assert "not into Chinese" in capsys.readouterr().err
    assert foreign_main([*args, "--direction", "fr-zh"]) == 2
