"""export.cli evaluate --direction on the tiny multilingual bundle of tests/multi_bundle.py: every direction is scored
with the service's tagging (a pivoted one through both legs), Chinese targets with sacreBLEU's zh tokenizer, and the
scores of a direction other than the bundle's own pair are sealed beside its headline, not over it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from multi_bundle import LEXICON, NAME, cached_multi_bundle, sentence, source_digest

from core.bundle import load_bundle
from export.cli import main as export_main
from export.direction_scoring import source_ids

SPLIT = "lexicon.test"


@pytest.fixture(scope="module")
def bundle_and_data(request, tmp_path_factory):
    work = tmp_path_factory.mktemp("evaluate-directions")
    repository = cached_multi_bundle(Path(request.config.cache.mkdir("mtserve")), work, source_digest())
    data = work / "data"
    data.mkdir()
    rng = random.Random(7)
    lines = [[rng.randrange(len(LEXICON["en"])) for _ in range(rng.randint(2, 5))] for _ in range(12)]
    for language in ("de", "en", "zh"):
        text = "\n".join(sentence(words, language) for words in lines) + "\n"
        (data / f"{SPLIT}.{language}").write_text(text, encoding="utf-8")
    return repository / NAME / "1", data


def evaluate(bundle: Path, data: Path, direction: str | None, report: Path, *extra: str) -> int:
    args = ["evaluate", "--bundle", str(bundle), "--data", str(data), "--split", SPLIT, "--beam", "1"]
    args += ["--variants", "fp32", "--report", str(report), *extra]
    return export_main(args + (["--direction", direction] if direction else []))


@pytest.mark.parametrize("direction", ["en-de", "zh-en", "en-zh"])
def test_a_direct_direction_is_scored_tagged_and_sealed_beside_the_headline(bundle_and_data, tmp_path, direction):
    bundle, data = bundle_and_data
    before = load_bundle(bundle).manifest["variants"]["fp32"].get("bleu")
    report = tmp_path / "report.json"
    assert evaluate(bundle, data, direction, report) == 0
    result = json.loads(report.read_text())["fp32"][SPLIT]["beam1"]
    # the tiny model half knows its lexicon (BLEU 26-71 here); sources tagged for another target score about 0
    assert result["bleu"] > 15, result
    assert ("tok:zh" in result["signature"]) == direction.endswith("-zh")
    variant = load_bundle(bundle).manifest["variants"]["fp32"]
    assert variant["direction_evaluations"][direction][SPLIT]["beam1"]["bleu"] == result["bleu"]
    assert variant.get("bleu") == before  # the headline (the bundle's own pair) is left as it was


def test_a_pivoted_direction_runs_both_legs(bundle_and_data, tmp_path):
    bundle, data = bundle_and_data
    report = tmp_path / "report.json"
    assert evaluate(bundle, data, "de-zh", report, "--no-seal") == 0
    result = json.loads(report.read_text())["fp32"][SPLIT]["beam1"]
    assert result["pivot"] == "en"
    assert "tok:zh" in result["signature"]
    assert result["bleu"] > 15, result  # two legs of the lexicon model (about 24 here)


def test_the_bundles_own_direction_is_the_headline(bundle_and_data, tmp_path):
    bundle, data = bundle_and_data
    report = tmp_path / "report.json"
    assert evaluate(bundle, data, None, report) == 0
    headline = load_bundle(bundle).manifest["variants"]["fp32"]["bleu"]
    assert headline["beam1"]["bleu"] == json.loads(report.read_text())["fp32"][SPLIT]["beam1"]["bleu"] > 15


def test_a_direction_the_bundle_does_not_serve_is_refused(bundle_and_data, tmp_path, capsys):
    bundle, data = bundle_and_data
    assert evaluate(bundle, data, "de-fr", tmp_path / "report.json") == 2
    assert "serves de-en, en-de, zh-en, en-zh, de-zh, zh-de; not de-fr" in capsys.readouterr().err


def test_source_ids_put_the_tag_first_and_keep_the_limit():
    class Tokenizer:
        def encode_batch(self, texts):
            return [list(range(10, 10 + len(t))) for t in texts]

    class FakeEngine:
        max_source_tokens = 6
        tokenizer = Tokenizer()

        @staticmethod
        def normalize_source(text):
            return text

    ids, cut = source_ids(FakeEngine(), ["ab", "abcdefgh"], prefix=[4, 5])
    assert ids == [[4, 5, 10, 11, 2], [4, 5, 10, 11, 12, 2]]  # tag + source + EOS within 6 tokens
    assert cut == 1
