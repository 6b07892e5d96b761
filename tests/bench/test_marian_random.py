"""bench/marian_random.py and ``python -m bench.engine`` on an imported bundle: a random Marian pair (our import and
CTranslate2's conversion of one checkpoint), small here, run side by side with the greedy tokens checked first."""

from __future__ import annotations

import json

import pytest
from marian_checkpoint import SOURCE_WORDS, TARGET_WORDS, sentences

pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")


def test_an_imported_bundle_runs_beside_its_ctranslate2_twin(tmp_path):
    from bench.engine import main as bench_engine
    from bench.marian_random import main as marian_random

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for language, words, seed in (("de", SOURCE_WORDS, 1), ("en", TARGET_WORDS, 2)):
        (corpus / f"train.{language}").write_text("\n".join(sentences(words, 300, seed)) + "\n", encoding="utf-8")
    out = tmp_path / "pair"
    shape = ["--d-model", "32", "--layers", "1", "--heads", "4", "--ffn", "64", "--vocab", "400", "--spm-vocab", "100"]
    assert marian_random(["--data", str(corpus), "--out", str(out), *shape]) == 0
    manifest = json.loads((out / "repository/opus-shape/1/manifest.json").read_text())
    assert manifest["imported"]["vocabulary"]["marian_size"] == 400 and set(manifest["variants"]) >= {"fp32", "int8"}
    report = tmp_path / "engine.json"
    args = ["--data", str(corpus), "--split", "train", "--limit", "24", "--batch1-limit", "2", "--repeats", "1"]
    args += ["--bundle", str(out / "repository/opus-shape/1"), "--ct2", str(out / "ct2"), "--settings", "greedy/b32"]
    args += ["--engines", "ort-fp32", "ct2-fp32", "ort-int8", "ct2-int8", "--output", "", "--json", str(report)]
    assert bench_engine(args) == 0  # exits 1 when CTranslate2 fp32 agrees with ort-fp32 on < 99% of sentences
    results = json.loads(report.read_text())
    assert results["meta"]["reference"] == "ort-fp32" and results["meta"]["agreement"]["ct2-fp32"] == 1.0
    assert {row["engine"] for row in results["rows"]} == {"ort-fp32", "ct2-fp32", "ort-int8", "ct2-int8"}
