"""Back-translation (model/backtranslate.py): tagged reverse-direction translation in chunks that a rerun continues,
looping or empty outputs left out, and the recipe's ``source_tag`` marking synthetic sources in the mix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import model.backtranslate as bt_module
from model.backtranslate import backtranslate, model_translator
from model.cli import main as cli_main
from model.data import read_lines
from model.prepare import CorpusSpec


def _fake(calls: list[list[str]]):
    def translate(model, tokenizer, texts, beam_size=1, **_):
        calls.append(list(texts))
        return ["" if "empty" in t else f"DE {t.split(' ', 1)[1]}" for t in texts]

    return translate


def test_chunks_are_appended_and_a_rerun_continues(tmp_path: Path, monkeypatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(bt_module, "translate", _fake(calls))
    monkeypatch.setattr(bt_module, "CHUNK", 2)
    texts = ["One  sentence.", "Two.", "an empty one", "Four."]
    translator = model_translator(None, None, "en-de")
    first = backtranslate(translator, texts[:3], "en-de", tmp_path, progress=False)
    assert calls == [["<2de> One sentence.", "<2de> Two."], ["<2de> an empty one"]]
    assert first == {"read": 3, "kept": 2, "dropped_this_call": 1}
    second = backtranslate(translator, texts, "en-de", tmp_path, progress=False)
    assert calls[-1] == ["<2de> Four."] and second["kept"] == 3
    assert read_lines(tmp_path / "bt.de") == ["DE One sentence.", "DE Two.", "DE Four."]
    assert read_lines(tmp_path / "bt.en") == ["One sentence.", "Two.", "Four."]


def test_recipe_source_tag_marks_synthetic_sources_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "bt").mkdir(parents=True)
    (data / "bt" / "bt.de").write_text("Ein künstlicher deutscher Satz.\n")
    (data / "bt" / "bt.en").write_text("A real English sentence.\n")
    recipe = {"name": "bt", "directions": ["de-en", "en-de"], "corpora": [
        {"name": "news-bt", "source": "de", "reader": "parallel", "path": "bt", "directions": ["de-en"],
         "source_tag": "<bt>"}]}  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    out = tmp_path / "out"
    assert cli_main(["prepare", "--recipe", str(tmp_path / "r.json"), "--data", str(data), "--out", str(out)]) == 0
    assert read_lines(out / "train.src") == ["<2en> <bt> Ein künstlicher deutscher Satz."]
    assert read_lines(out / "train.tgt") == ["A real English sentence."]


def test_a_corpus_path_starting_with_dot_slash_is_the_working_directorys(tmp_path: Path, monkeypatch) -> None:
    """Back-translations are made in runs/bt/, not in the shared data folder the other corpora are under."""
    made = tmp_path / "work" / "runs" / "bt" / "news-de"
    made.mkdir(parents=True)
    (made / "bt.de").write_text("Ein künstlicher deutscher Satz.\n")
    (made / "bt.en").write_text("A real English sentence.\n")
    (tmp_path / "shared").mkdir()
    recipe = {"name": "bt", "directions": ["de-en", "en-de"], "corpora": [
        {"name": "news-bt", "source": "de", "reader": "parallel", "path": "./runs/bt/news-de", "directions": ["de-en"],
         "source_tag": "<bt>"}]}  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    monkeypatch.chdir(tmp_path / "work")
    out = tmp_path / "out"
    assert (
        cli_main(
            ["prepare", "--recipe", str(tmp_path / "r.json"), "--data", str(tmp_path / "shared"), "--out", str(out)]
        )
        == 0
    )
    assert read_lines(out / "train.src") == ["<2en> <bt> Ein künstlicher deutscher Satz."]


@pytest.mark.parametrize(
    ("rule", "kept"),
    [
        ("copied", ["A Boston terrier runs on the grass.", "Two men are playing soccer."]),  # the name copied stays
        ("none", ["Two men are playing soccer."]),
    ],
)
def test_forward_translated_chinese_keeps_the_latin_words_its_rule_allows(tmp_path: Path, rule, kept) -> None:
    """The model's own English->Chinese of Multi30k's captions as en-zh pairs: a Chinese side with a German word the
    English lacks ("reparieren") is dropped under either rule, one with a word copied from the English ("Terrier")
    only under ``none``; the drops are counted."""
    data = tmp_path / "data"
    (data / "ft").mkdir(parents=True)
    (data / "ft" / "bt.zh").write_text(
        "人 reparieren了一家房子的屋顶。\n一只波士顿 Terrier在草地上奔跑。\n两个男人在踢足球。\n"
    )
    (data / "ft" / "bt.en").write_text(
        "People repair the roof of a house.\nA Boston terrier runs on the grass.\nTwo men are playing soccer.\n"
    )
    recipe = {"name": "ft", "directions": ["en-zh", "zh-en"], "corpora": [
        {"name": "m30k-ft-zh", "source": "zh", "reader": "parallel", "path": "ft", "directions": ["en-zh"],
         "chinese_latin": rule}]}  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    out = tmp_path / "out"
    assert cli_main(["prepare", "--recipe", str(tmp_path / "r.json"), "--data", str(data), "--out", str(out)]) == 0
    assert sorted(read_lines(out / "train.src")) == [f"<2zh> {e}" for e in kept]  # the mix shuffles
    assert all(any(c in t for c in "足球草地") for t in read_lines(out / "train.tgt"))
    report = json.loads((out / "prepare.json").read_text())
    assert report["corpora"]["m30k-ft-zh"]["dropped"]["latin_words"] == 3 - len(kept)


def test_chinese_latin_needs_a_known_rule_and_a_chinese_side() -> None:
    with pytest.raises(ValueError, match="one of"):
        CorpusSpec.from_dict({"name": "x", "source": "zh", "reader": "parallel", "path": "x", "chinese_latin": "some"})
    with pytest.raises(ValueError, match="Chinese side"):
        CorpusSpec.from_dict({"name": "x", "source": "de", "reader": "parallel", "path": "x", "chinese_latin": "none"})
