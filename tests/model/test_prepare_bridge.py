"""German-Chinese pairs joined through English (model/readers.py ``bridge-tatoeba`` / ``bridge-wmt``): both
directions tagged, the held-out split made by the shared English sentence, and a held-out pair's German and Chinese
kept out of every training pair, short sentences included."""

from __future__ import annotations

import json
from pathlib import Path

from model.cli import main as cli_main
from model.corpus_split import split_of
from model.data import read_lines
from model.directions import direction_of_line

ENGLISH = [f"Sentence number {i} is here." for i in range(40)]


def _data(root: Path) -> None:
    root.mkdir(parents=True)
    de = [f"{e}\tSatz Nummer {i} ist hier.\tCC" for i, e in enumerate(ENGLISH)] + ["Only German.\tNur Deutsch."]
    zh = [f"{e}\t第{i}句在这里。\tCC" for i, e in enumerate(ENGLISH)] + ["Only Chinese.\t只有中文。"]
    (root / "deu.txt").write_text("\n".join(de) + "\n", encoding="utf-8")
    (root / "cmn.txt").write_text("\ufeff" + "\n".join(zh) + "\n", encoding="utf-8")
    wmt = root / "wmt"
    wmt.mkdir()
    (wmt / "nt.en-de.src.en").write_text("One English source.\nTwo English sources.\n")
    (wmt / "nt.en-de.ref.A.de").write_text("Eine englische Quelle.\nZwei englische Quellen.\n")
    (wmt / "nt.en-zh.src.en").write_text("Two English sources.\nOne English source.\n")  # another order
    (wmt / "nt.en-zh.ref.A.zh").write_text("两个英文来源。\n一个英文来源。\n")
    (wmt / "nt.en-zh.ref.B.zh").write_text("两个英语来源。\n一个英语来源。\n")


def _prepare(tmp_path: Path) -> tuple[Path, dict]:
    _data(tmp_path / "data")
    recipe = {
        "name": "toy-bridge", "valid_sample": 50, "directions": ["de-en", "zh-en", "de-zh", "zh-de"],
        "corpora": [
            {"name": "tatoeba-de", "source": "de", "reader": "tatoeba", "path": "deu.txt", "held_out": 0},
            {"name": "tatoeba-zh", "source": "zh", "reader": "tatoeba", "path": "cmn.txt", "held_out": 0},
            {"name": "bridge", "source": "de", "target": "zh", "reader": "bridge-tatoeba", "path": "deu.txt",
             "other": "cmn.txt", "held_out": 5},
            {"name": "bridge-wmt", "source": "de", "target": "zh", "reader": "bridge-wmt", "path": "wmt"},
        ],
    }  # fmt: skip
    (tmp_path / "recipe.json").write_text(json.dumps(recipe), encoding="utf-8")
    out = tmp_path / "out"
    args = ["prepare", "--recipe", str(tmp_path / "recipe.json"), "--data", str(tmp_path / "data"), "--out", str(out)]
    assert cli_main(args) == 0
    return out, json.loads((out / "prepare.json").read_text())


def test_bridge_pairs_go_both_ways_and_hold_out_by_the_shared_english(tmp_path: Path) -> None:
    out, manifest = _prepare(tmp_path)
    bridge = manifest["corpora"]["bridge"]
    fraction = 5 / 40
    held = [i for i, e in enumerate(ENGLISH) if split_of(e, fraction, fraction) != "train"]
    assert held and bridge["read"]["train"] == 40 - len(held)
    assert bridge["read"]["val"] + bridge["read"]["test"] == len(held)
    pairs = set(zip(read_lines(out / "train.src"), read_lines(out / "train.tgt"), strict=True))
    kept = next(i for i in range(40) if i not in held)
    assert (f"<2zh> Satz Nummer {kept} ist hier.", f"第{kept}句在这里。") in pairs
    assert (f"<2de> 第{kept}句在这里。", f"Satz Nummer {kept} ist hier.") in pairs
    # a held-out pair's German and Chinese are in no training pair, not even the (German, English) one
    train_text = set(read_lines(out / "train.src")) | set(read_lines(out / "train.tgt"))
    for i in held:
        assert not any(f"Nummer {i} ist" in t or f"第{i}句" in t for t in train_text)
    assert manifest["corpora"]["tatoeba-de"]["dropped"]["in_val_or_test"] == len(held)
    assert manifest["corpora"]["tatoeba-zh"]["dropped"]["in_val_or_test"] == len(held)
    # the held-out pairs are written for evaluation, German beside Chinese
    test_de = read_lines(out / "bridge.test.de") if bridge["read"]["test"] else []
    assert len(test_de) == bridge["read"]["test"] and all(t.startswith("Satz") for t in test_de)


def test_wmt_bridge_joins_references_by_english_source_whatever_the_order(tmp_path: Path) -> None:
    out, manifest = _prepare(tmp_path)
    assert manifest["corpora"]["bridge-wmt"]["read"]["train"] == 2 * 2  # two sources x (one de x two zh refs)
    pairs = set(zip(read_lines(out / "train.src"), read_lines(out / "train.tgt"), strict=True))
    assert ("<2zh> Eine englische Quelle.", "一个英文来源。") in pairs
    assert ("<2zh> Zwei englische Quellen.", "两个英语来源。") in pairs
    assert ("<2de> 一个英语来源。", "Eine englische Quelle.") in pairs


def test_validation_lines_into_chinese_are_told_apart_by_source_language(tmp_path: Path) -> None:
    out, _ = _prepare(tmp_path)
    directions = {direction_of_line(line) for line in read_lines(out / "val.src")}
    assert directions <= {"de-en", "zh-en", "de-zh", "zh-de"} and {"de-zh", "zh-de"} <= directions
    assert direction_of_line("<2zh> Ich habe heute leider keine Zeit für dich.") == "de-zh"
    assert direction_of_line("<2zh> I have no time for you today, sadly.") == "en-zh"
    assert direction_of_line("<2de> 我今天没有时间。") == "zh-de"
