"""Data preparation (model/prepare.py, model/normalize.py): reading, splitting, normalising, filtering, leaks,
weights, and byte-identical output for the same recipe, on small corpora the tests write themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.normalize import normalize, normalize_for
from model.cli import main as cli_main
from model.data import read_lines, read_parallel
from model.prepare import Recipe, read_cedict


def test_read_lines_splits_at_newline_only(tmp_path: Path) -> None:
    # U+2028 and \x1c inside a sentence: str.splitlines() would make three lines of the first one
    (tmp_path / "a.de").write_text("Satz\u2028eins\x1cweiter\nzwei\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("sentence one\ntwo\n", encoding="utf-8")
    src, tgt = read_parallel(tmp_path, "a", "de", "en")
    assert src == ["Satz\u2028eins\x1cweiter", "zwei"] and tgt == ["sentence one", "two"]
    (tmp_path / "b.txt").write_text("no final newline", encoding="utf-8")
    assert read_lines(tmp_path / "b.txt") == ["no final newline"]
    (tmp_path / "c.txt").write_text("", encoding="utf-8")
    assert read_lines(tmp_path / "c.txt") == []


def test_normalize_quotes_spaces_nfc_and_simplified_chinese() -> None:
    assert normalize("  \u201eGr\u0075\u0308\u00dfe\u201c  sagt\u00a0er\u2019s\t\n") == '"Grüße" sagt er\'s'
    assert normalize("a\x07b") == "a b"
    assert normalize_for("我們說漢語。", "zh") == "我们说汉语。"
    assert normalize_for("我們", "zh", simplify_chinese=False) == "我們"
    assert normalize_for("Für uns", "de") == "Für uns"


def test_cedict_entries_become_headword_gloss_pairs(tmp_path: Path) -> None:
    path = tmp_path / "cedict.txt"
    path.write_text(
        "# CC-CEDICT header\n"
        "中國 中国 [Zhong1 guo2] /China/\n"
        "們 们 [men5] /plural marker for pronouns (used in 我們, 他們)/CL:個|个/\n"
        "張 张 [Zhang1] /surname Zhang/\n"
        "妳 你 [ni3] /variant of 你[ni3]/\n"
        "110 110 [yao1 yao1 ling2] /the emergency number/\n"
        "二氧化碳 二氧化碳 [er4 yang3 hua4 tan4] /carbon dioxide CO2/\n",
        encoding="utf-8",
    )
    assert read_cedict(path) == [
        ("中国", "China"),
        ("们", "plural marker for pronouns"),
        ("二氧化碳", "carbon dioxide CO2"),
    ]


def _corpora(root: Path) -> None:
    news = root / "news"
    news.mkdir(parents=True)
    taxes_de, taxes_en = "Die Regierung hat neue Steuern angekündigt.", "The government announced new taxes."
    long_de = "Ein Satz, der viel zu kurz übersetzt wurde und deshalb herausfällt."
    train_de = [taxes_de, "Der Zug kommt um acht Uhr an.", taxes_de, "x" * 40, long_de]
    train_en = [taxes_en, "The train arrives at eight.", taxes_en, "x" * 40, "Short."]
    (news / "t1.de").write_text("\n".join(train_de) + "\n", encoding="utf-8")
    (news / "t1.en").write_text("\n".join(train_en) + "\n", encoding="utf-8")
    (news / "dev.de").write_text("Der Zug kommt um acht Uhr an.\nKurz.\n", encoding="utf-8")
    (news / "dev.en").write_text("The train comes at eight.\nThis validation pair is long against its source.\n")
    (root / "tatoeba.txt").write_text(
        "".join(f"Sentence number {i}.\tSatz Nummer {i}.\n" for i in range(200)), encoding="utf-8"
    )
    zh = root / "zh"
    zh.mkdir()
    (zh / "n.zh").write_text("政府宣布了新的稅收政策。\n今天天氣很好。\n", encoding="utf-8")
    (zh / "n.en").write_text("The government announced a new tax policy.\nThe weather is nice today.\n")


def _recipe(path: Path, **news_extra) -> Path:
    recipe = {
        "name": "toy",
        "valid_sample": 5,
        "corpora": [
            {"name": "news", "source": "de", "reader": "parallel", "path": "news", "val": ["dev"], "weight": 2,
             **news_extra},
            {"name": "tatoeba", "source": "de", "reader": "tatoeba", "path": "tatoeba.txt", "held_out": 20,
             "weight": 0.5},
            {"name": "news-zh", "source": "zh", "reader": "parallel", "path": "zh", "weight": 1},
        ],
    }  # fmt: skip
    path.write_text(json.dumps(recipe), encoding="utf-8")
    return path


def test_prepare_filters_dedups_blocks_leaks_weights_and_counts(tmp_path: Path) -> None:
    _corpora(tmp_path / "data")
    recipe, out = _recipe(tmp_path / "recipe.json"), tmp_path / "out"
    assert cli_main(["prepare", "--recipe", str(recipe), "--data", str(tmp_path / "data"), "--out", str(out)]) == 0
    manifest = json.loads((out / "prepare.json").read_text())
    news = manifest["corpora"]["news"]
    # the validation source "Der Zug kommt ..." is dropped from training; the copy, the ratio outlier, the repeat
    assert news["dropped"] == {"copy": 1, "duplicate": 1, "in_val_or_test": 1, "ratio": 1}
    assert news["kept"]["train"] == 1 and news["in_mix"] == 2  # weight 2
    # validation pairs are normalised but never filtered, even one outside the ratio band
    assert read_parallel(out, "news.val", "de", "en")[0] == ["Der Zug kommt um acht Uhr an.", "Kurz."]
    tatoeba = manifest["corpora"]["tatoeba"]
    assert tatoeba["kept"]["val"] > 0 and tatoeba["kept"]["test"] > 0
    assert 0 < tatoeba["in_mix"] < tatoeba["kept"]["train"]  # weight 0.5 samples about half
    zh_src, _ = read_parallel(out, "news-zh.train", "zh", "en")
    assert zh_src == ["政府宣布了新的税收政策。", "今天天气很好。"]  # Simplified
    src, tgt = read_parallel(out, "train", "src", "en")  # two source languages: the mixed files are .src
    assert len(src) == manifest["train"] == news["in_mix"] + tatoeba["in_mix"] + 2
    assert "The train arrives at eight." not in tgt
    val_src, _ = read_parallel(out, "val", "src", "en")
    assert len(val_src) == manifest["val"] == 2 + min(5, tatoeba["kept"]["val"])


def test_prepare_is_deterministic(tmp_path: Path) -> None:
    _corpora(tmp_path / "data")
    recipe = _recipe(tmp_path / "recipe.json")
    outputs = []
    for name in ("a", "b"):
        cli_main(["prepare", "--recipe", str(recipe), "--data", str(tmp_path / "data"), "--out", str(tmp_path / name)])
        outputs.append(
            {p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir()) if p.name != "prepare.json"}
        )
    assert outputs[0] == outputs[1] and len(outputs[0]) > 6


def test_recipe_rejects_unknown_reader_repeated_names_and_unequal_files(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        Recipe.load(_recipe(tmp_path / "r.json", check_alignment=True))
    bad = {"name": "x", "corpora": [{"name": "a", "source": "de", "reader": "csv", "path": "p"}]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="unknown reader"):
        Recipe.load(tmp_path / "bad.json")
    twice = {"name": "x", "corpora": [{"name": "a", "source": "de", "reader": "parallel", "path": "p"}] * 2}
    (tmp_path / "twice.json").write_text(json.dumps(twice))
    with pytest.raises(ValueError, match="repeat"):
        Recipe.load(tmp_path / "twice.json")
    _corpora(tmp_path / "data")
    (tmp_path / "data" / "news" / "t1.en").write_text("one line\n")
    with pytest.raises(ValueError, match="lines"):
        cli_main(["prepare", "--recipe", str(_recipe(tmp_path / "ok.json")), "--data", str(tmp_path / "data"),
                  "--out", str(tmp_path / "out")])  # fmt: skip


def test_split_language_finds_the_source_file_of_a_split(tmp_path: Path) -> None:
    from model.data import split_language

    for name in ("news-zh.val.zh", "news-zh.val.en", "val.src", "val.en", "t.val.de", "t.val.en", "t.val.attribution"):
        (tmp_path / name).write_text("x\n")
    assert split_language(tmp_path, "val", "src", "en") == "src"
    assert split_language(tmp_path, "news-zh.val", "src", "en") == "zh"
    assert split_language(tmp_path, "t.val", "src", "en") == "de"
    with pytest.raises(FileNotFoundError, match="no single source file"):
        split_language(tmp_path, "missing", "src", "en")


def test_export_refuses_a_model_of_several_sources_without_a_bundle_language(tmp_path: Path, capsys) -> None:
    from model_toys import tiny_config

    from export.cli import main as export_main
    from model.checkpoint import save_release
    from model.transformer import Transformer

    save_release(tmp_path / "m", Transformer(tiny_config()), {"run": {"source_lang": "src", "target_lang": "en"}})
    code = export_main(["export", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "b"), "--name", "x",
                        "--variants", "fp32"])  # fmt: skip
    assert code == 2 and "--source-language" in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_is_loop_catches_a_stuck_decoder_and_not_ordinary_repetition() -> None:
    from model.evaluate import bleu, is_loop

    for stuck in ("The house was dilapidididididi", "the man the man the man the man the man", "No no no no no no"):
        assert is_loop(stuck), stuck
    for fine in ("Mississippi", "In 1000000 cases", "hahaha", "He said no, no, no, no.", "Hmmmm.", "Tom is here."):
        assert not is_loop(fine), fine
    assert bleu(["dididididididi", "A man."], ["A dog.", "A man."])["loops"] == 1
