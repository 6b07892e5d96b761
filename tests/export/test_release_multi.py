"""scripts/release_multi.sh end to end on the tiny multilingual run of tests/multi_bundle.py, with a lexicon test folder
standing in for runs/data/multi6: German<->Chinese direct against pivot measured and decided, one bundle exported with
every direction, the shortlist gate run, every direction scored through the engine and sealed, the previous release
scored on the same splits."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from multi_bundle import LEXICON, NAME, cached_multi_build, sentence, source_digest

from core.bundle import load_bundle

ROOT = Path(__file__).resolve().parents[2]
SPLITS = {
    "multi30k.test": ("de", "en"),
    "tatoeba-de.test": ("de", "en"),
    "news-de.val": ("de", "en"),
    "wiki-zh.test": ("zh", "en"),
    "tatoeba-zh.test": ("zh", "en"),
    "tico-zh.test": ("zh", "en"),
    "news-zh.val": ("zh", "en"),
    "bridge-tatoeba.test": ("de", "zh"),
    # validation splits: the confidence maps are fitted on them
    "multi30k.val": ("de", "en"),
    "tatoeba-de.val": ("de", "en"),
    "tatoeba-zh.val": ("zh", "en"),
    "wiki-zh.val": ("zh", "en"),
    "tico-zh.val": ("zh", "en"),
    "bridge-tatoeba.val": ("de", "zh"),
}
DIRECTIONS = ["de-en", "en-de", "zh-en", "en-zh", "de-zh", "zh-de"]


def lexicon_data(build: Path, folder: Path) -> Path:
    folder.mkdir()
    for name in ("train.src", "train.tgt"):
        shutil.copy(build / "corpus" / name, folder / name)
    (folder / "prepare.json").write_text("{}\n")
    rng = random.Random(5)
    for split, languages in SPLITS.items():
        lines = [[rng.randrange(len(LEXICON["en"])) for _ in range(rng.randint(2, 4))] for _ in range(6)]
        for language in languages:
            text = "\n".join(sentence(words, language) for words in lines) + "\n"
            (folder / f"{split}.{language}").write_text(text, encoding="utf-8")
    return folder


def test_release_multi_exports_and_scores_every_direction(request, tmp_path):
    build = cached_multi_build(Path(request.config.cache.mkdir("mtserve")), source_digest())
    out, repository = tmp_path / "card", tmp_path / "repository"
    env = {
        **os.environ,
        "RUN": str(build / "run"),
        "DATA": str(lexicon_data(build, tmp_path / "data")),
        "OUT": str(out),
        "REPOSITORY": str(repository),
        "PYTHON": sys.executable,
        "SHORTLIST_PAIRS": "3000",
    }
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "release_multi.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]

    # the German<->Chinese decision follows the measurements
    bridge = {
        (pair, mode): json.loads((out / f"bridge.{pair}.{mode}.json").read_text())["results"]["beam4"]["bleu"]
        for pair in ("de-zh", "zh-de")
        for mode in ("direct", "pivot")
    }
    off_target = {path.name: json.loads(path.read_text())["share"] for path in sorted(out.glob("off-target.*.json"))}
    assert len(off_target) == 8, off_target  # 4 splits of other domains, direct and pivot

    def served_direct(pair: str) -> bool:  # each way decided on its own
        on_target = all(
            share <= off_target[name.replace(".direct.", ".pivot.")] + 0.01
            for name, share in off_target.items()
            if name.startswith(f"off-target.{pair}.") and ".direct." in name
        )
        return bridge[(pair, "direct")] > bridge[(pair, "pivot")] and on_target

    manifest = load_bundle(repository / NAME / "1").manifest
    assert list(manifest["directions"]) == DIRECTIONS
    for pair in ("de-zh", "zh-de"):
        assert ("pivot" in manifest["directions"][pair]) != served_direct(pair), (bridge, off_target, manifest)
    assert manifest["decoding"]["no_repeat_ngram_size"] == 4
    assert "graphs/float16.weights" in manifest["files"]  # stored as float16 (--float16-storage)
    assert not (out / "model.safetensors").exists()  # and not a second time beside the card
    assert "shortlist left out" in result.stderr or "shortlist kept" in result.stderr

    # every direction scored through the engine: its own report, and sealed (the own pair as the headline)
    int8 = manifest["variants"]["int8"]
    for direction in DIRECTIONS:
        report = json.loads((out / f"evaluation.{direction}.json").read_text())["int8"]
        first = next(iter(report.values()))
        assert first["beam4"]["bleu"] >= 0
        sealed = int8["bleu"] if direction == "de-en" else int8["direction_evaluations"][direction][first["split"]]
        assert sealed["beam4"]["bleu"] == first["beam4"]["bleu"]
    for direction in DIRECTIONS:  # a confidence map for each direct direction not into Chinese
        fitted = (
            manifest["confidence"] if direction == "de-en" else manifest.get("direction_confidence", {}).get(direction)
        )
        if "pivot" in manifest["directions"][direction] or direction.endswith("-zh"):
            assert fitted is None and not (out / f"confidence.{direction}.json").exists()
            continue
        assert fitted["direction"] == direction and fitted["fit"]["sentences"] > 0 and fitted["test"]["sentences"] > 0
        assert json.loads((out / f"confidence.{direction}.json").read_text())["a"] == fitted["a"]
    for direction in ("en-zh", "de-zh"):  # Latin-script words in its Chinese, on the test captions
        foreign = json.loads((out / f"foreign-words.{direction}.json").read_text(encoding="utf-8"))
        assert foreign["direction"] == direction and foreign["texts"] == 6
        assert Path(foreign["input"]).name == f"multi30k.test.{direction[:2]}"
    chosen = dict(item.split("=") for item in (out / "direction-models").read_text().strip().split(","))
    assert set(chosen) == {"de-en", "zh-en"}
    for direction in ("de-en", "zh-en"):  # the shipped release on the same splits, and the better one answers
        new = json.loads((out / f"evaluation.{direction}.json").read_text())["int8"]
        old = json.loads((out / f"previous.{direction}.json").read_text())["int8"]
        assert set(old) == set(new)
        mean = {m: sum(r[s]["beam4"]["bleu"] for s in r) / len(r) for m, r in (("multi", new), (direction, old))}
        assert chosen[direction] == ("multi" if mean["multi"] > mean[direction] else direction), mean
    assert f"MT_DIRECTION_MODELS={(out / 'direction-models').read_text().strip()}" in result.stderr
    assert (repository / "direction-models").read_text() == (out / "direction-models").read_text()  # the default
