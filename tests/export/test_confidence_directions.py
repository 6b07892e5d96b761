"""Confidence maps per direction of a multilingual bundle (export/confidence.py ``--direction``), fitted on the tiny
multilingual bundle of tests/multi_bundle.py and served by the directions that have one: the own pair's in the
manifest's ``confidence``, another direction's in ``direction_confidence``, none for a pivot."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
from bundle_copies import copy_bundle
from live_server import LiveServer
from multi_bundle import LEXICON, NAME, cached_multi_bundle, sentence, source_digest

import export.confidence as confidence_module
from core.bundle import load_bundle
from core.directions import tag_ids

SPLITS = ("multi30k.val", "multi30k.test")


def lexicon_splits(folder: Path) -> Path:
    """German-English and Chinese-English splits of the lexicon's sentences (the tiny model's language)."""
    folder.mkdir()
    rng = random.Random(7)
    for split in SPLITS:
        for other in ("de", "zh"):
            lines = [[rng.randrange(len(LEXICON["en"])) for _ in range(rng.randint(2, 4))] for _ in range(8)]
            name = split if other == "de" else split.replace("multi30k", "tatoeba-zh")
            for language in (other, "en"):
                text = "\n".join(sentence(words, language) for words in lines) + "\n"
                (folder / f"{name}.{language}").write_text(text, encoding="utf-8")
    return folder


def test_each_direction_gets_its_own_map_from_tagged_sources(request, tmp_path, capsys, monkeypatch):
    repository = cached_multi_bundle(Path(request.config.cache.mkdir("mtserve")), tmp_path, source_digest())
    bundle = repository / NAME / "1"
    data = lexicon_splits(tmp_path / "data")
    seen: list[list[int]] = []
    original = confidence_module.Engine.translate_ids

    def recording(self, sources, *args, **kwargs):
        seen.extend(sources)
        return original(self, sources, *args, **kwargs)

    monkeypatch.setattr(confidence_module.Engine, "translate_ids", recording)
    common = ["--bundle", str(bundle), "--data", str(data), "--fit-split", "multi30k.val", "--test-split",
              "multi30k.test", "--beam", "1"]  # fmt: skip
    assert confidence_module.main([*common, "--direction", "en-de"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["direction"] == "en-de" and report["fit"]["sentences"] == 8 and report["test"]["sentences"] == 8
    tokenizer = confidence_module.Engine(load_bundle(bundle)).tokenizer
    tag = tag_ids(tokenizer.encode, tokenizer.sp.piece_to_id, "<2de>")
    assert len(seen) == 16 and all(ids[: len(tag)] == tag for ids in seen)  # the service's tagging

    assert confidence_module.main([*common, "--direction", "de-en"]) == 0  # the own pair
    manifest = load_bundle(bundle).manifest
    assert manifest["confidence"]["direction"] == "de-en"
    assert manifest["direction_confidence"]["en-de"]["direction"] == "en-de"
    assert set(manifest["direction_confidence"]) == {"en-de"}

    capsys.readouterr()
    assert confidence_module.main([*common, "--direction", "de-zh"]) == 2
    assert "pivot" in capsys.readouterr().err
    assert confidence_module.main([*common, "--direction", "fr-en"]) == 2


def test_the_service_answers_with_the_directions_map(request, tmp_path):
    built = cached_multi_bundle(Path(request.config.cache.mkdir("mtserve")), tmp_path / "built", source_digest())
    repository = tmp_path / "repository"
    high, low = {"a": 1.0, "b": 50.0}, {"a": 1.0, "b": -50.0}
    copy_bundle(built / NAME / "1", repository / NAME / "1", confidence=low, direction_confidence={"en-de": high})
    with LiveServer(repository, env={"MT_DEFAULT_MODEL": NAME}, log_path=tmp_path / "log") as server:

        def answer(source: str, target: str, text: str) -> dict:
            body = {"texts": [text], "source_language": source, "target_language": target}
            response = httpx.post(server.url + "/v1/translate", json=body, timeout=60)
            assert response.status_code == 200, response.text
            return response.json()["translations"][0]

        own = answer("de", "en", "hund katze ball")
        assert own["confidence"] < 0.01 and "low_confidence" in [w["code"] for w in own["warnings"]]
        assert answer("en", "de", "dog cat ball")["confidence"] > 0.99
        assert answer("zh", "en", "狗猫球").get("confidence") is None  # no map fitted for it
        pivoted = answer("de", "zh", "hund katze ball")
        assert pivoted["pivot"] == "en" and pivoted.get("confidence") is None
