"""Multi-direction data preparation (model/prepare.py with ``directions``, model/readers.py, model/directions.py):
tags, both directions per pair, synthetic pairs in their own direction only, WMT sets with several references,
language identification, near-duplicates of held-out sentences, dictionary caps, and per-direction validation
BLEU, on small corpora the tests write themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.cli import main as cli_main
from model.data import read_lines
from model.directions import bleu_tokenizer, direction_of_line, held_key, split_tag, tagged, wrong_language
from model.prepare import Recipe
from model.train import bleu_by_direction

DE = [
    "Die Regierung hat neue Steuern angekündigt.",
    "Der Zug kommt um acht Uhr am Bahnhof an.",
    "Wir haben gestern einen langen Spaziergang gemacht.",
]
EN = ["The government announced new taxes.", "The train arrives at the station at eight.",
      "We went for a long walk yesterday."]  # fmt: skip


def _data(root: Path) -> None:
    news = root / "news"
    news.mkdir(parents=True)
    (news / "t.de").write_text("\n".join([*DE, "Ceci est une phrase française assez longue pour être jugée."]) + "\n")
    (news / "t.en").write_text("\n".join([*EN, "This is a French sentence long enough to be judged."]) + "\n")
    (news / "dev.de").write_text("Das Wetter ist heute sehr schön und warm.\n")
    (news / "dev.en").write_text("The weather is very nice and warm today.\n")
    wmt = root / "wmt"
    wmt.mkdir()
    (wmt / "nt.en-de.src.en").write_text("The weather is very nice and warm today!\nA second English sentence here.\n")
    (wmt / "nt.en-de.ref.A.de").write_text("Das Wetter ist heute schön.\nEin zweiter englischer Satz hier.\n")
    (wmt / "nt.en-de.ref.B.de").write_text("Heute ist das Wetter schön.\nNoch ein zweiter Satz hier.\n")
    (wmt / "nt.de-en.src.de").write_text("Ein deutscher Satz aus den Nachrichten.\n")
    (wmt / "nt.de-en.ref.A.en").write_text("A German sentence from the news.\n")
    hyp = root / "hyp"
    hyp.mkdir()
    (hyp / "nt.de-en.hyp.sysA.en").write_text("A German sentence from the news today.\n")
    (hyp / "nt.en-de.hyp.sysA.de").write_text("Das Wetter ist schön.\nEin zweiter Satz aus England.\n")
    (root / "dict.txt").write_text(
        "".join(f"詞{i} 词{i} [ci2] /word number {i}/\n" for i in range(50)), encoding="utf-8"
    )


def _recipe(path: Path, **extra) -> Path:
    recipe = {
        "name": "toy-multi",
        "valid_sample": 10,
        "directions": ["de-en", "en-de", "zh-en", "en-zh"],
        "language_id": True,
        "near_duplicates": True,
        "corpora": [
            {"name": "news", "source": "de", "reader": "parallel", "path": "news", "val": ["dev"], "weight": 1},
            {"name": "wmt", "source": "de", "reader": "wmt", "path": "wmt", "weight": 1},
            {"name": "hyp-de-en", "source": "de", "reader": "hyp", "path": "hyp", "sources": "wmt",
             "directions": ["de-en"], "weight": 1},
            {"name": "dict", "source": "zh", "reader": "cedict", "path": "dict.txt", "cap": 20, "weight": 1},
        ],
        **extra,
    }  # fmt: skip
    path.write_text(json.dumps(recipe), encoding="utf-8")
    return path


@pytest.fixture
def prepared(tmp_path: Path) -> tuple[Path, dict]:
    _data(tmp_path / "data")
    out = tmp_path / "out"
    recipe = _recipe(tmp_path / "recipe.json")
    assert cli_main(["prepare", "--recipe", str(recipe), "--data", str(tmp_path / "data"), "--out", str(out)]) == 0
    return out, json.loads((out / "prepare.json").read_text())


def test_every_pair_goes_both_ways_with_the_target_tag(prepared) -> None:
    out, manifest = prepared
    src, tgt = read_lines(out / "train.src"), read_lines(out / "train.tgt")
    pairs = set(zip(src, tgt, strict=True))
    for de, en in zip(DE, EN, strict=True):
        assert (f"<2en> {de}", en) in pairs and (f"<2de> {en}", de) in pairs
    assert manifest["corpora"]["news"]["in_mix"] == {"de-en": 3, "en-de": 3}
    assert manifest["target_suffix"] == "tgt" and manifest["directions"] == ["de-en", "en-de", "zh-en", "en-zh"]
    assert all(split_tag(line)[0] in ("en", "de", "zh") for line in src)


def test_language_id_drops_a_french_pair_and_counts_it(prepared) -> None:
    out, manifest = prepared
    assert manifest["corpora"]["news"]["dropped"]["language"] == 1
    assert not any("française" in line for line in read_lines(out / "train.src") + read_lines(out / "train.tgt"))


def test_near_duplicates_of_held_out_sentences_are_dropped_on_either_side(prepared) -> None:
    """The WMT set's "...warm today!" differs from the validation sentence only in its punctuation."""
    out, manifest = prepared
    assert manifest["corpora"]["wmt"]["dropped"]["in_val_or_test"] == 2  # its two references
    assert not any("warm today" in line for line in read_lines(out / "train.src") + read_lines(out / "train.tgt"))
    assert held_key("The Weather, is  nice!") == held_key("the weather is nice") == "theweatherisnice"


def test_wmt_sets_give_a_pair_per_reference_and_system_outputs_keep_their_direction(prepared) -> None:
    out, manifest = prepared
    wmt = manifest["corpora"]["wmt"]
    assert wmt["read"]["train"] == 2 * 2 + 1  # en-de: two lines x two references; de-en: one
    pairs = set(zip(read_lines(out / "train.src"), read_lines(out / "train.tgt"), strict=True))
    assert ("<2de> A second English sentence here.", "Noch ein zweiter Satz hier.") in pairs
    assert ("<2en> Ein deutscher Satz aus den Nachrichten.", "A German sentence from the news today.") in pairs
    # a system's English output is a synthetic target, never a source
    assert not any(src.endswith("from the news today.") for src, _ in pairs)
    assert manifest["corpora"]["hyp-de-en"]["in_mix"] == {"de-en": 1}


def test_dictionary_cap_and_validation_tags(prepared) -> None:
    out, manifest = prepared
    assert manifest["corpora"]["dict"]["kept"]["train"] == 20
    val = read_lines(out / "val.src")
    assert sorted(direction_of_line(line) for line in val) == ["de-en", "en-de"]


def test_recipe_refuses_directions_a_corpus_cannot_give(tmp_path: Path) -> None:
    bad = {"name": "x", "corpora": [{"name": "a", "source": "de", "reader": "parallel", "path": "p",
                                     "directions": ["zh-en"]}]}  # fmt: skip
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="directions"):
        Recipe.load(tmp_path / "bad.json")


def test_directions_of_tagged_lines_and_their_bleu() -> None:
    assert tagged("Hallo Welt", "de-en") == "<2en> Hallo Welt"
    assert split_tag("<2zh> Hello") == ("zh", "Hello") and split_tag("Hello") == (None, "Hello")
    assert direction_of_line("<2en> 今天天气很好") == "zh-en" and direction_of_line("<2en> Guten Tag") == "de-en"
    assert direction_of_line("<2de> Good day") == "en-de" and direction_of_line("plain") is None
    assert bleu_tokenizer("en-zh") == "zh" and bleu_tokenizer("de-en") is None
    sources = ["<2en> Guten Morgen euch allen hier", "<2zh> good morning everyone"]
    references = ["Good morning to all of you here", "大家早上好"]
    scores = bleu_by_direction(sources, references, references)
    assert scores == {"de-en": 100.0, "en-zh": 100.0}  # the Chinese one scores only with the zh tokenizer
    assert bleu_by_direction(["plain"], ["x"], ["x"]) == {}


def test_wrong_language_judges_script_and_long_texts_only() -> None:
    assert wrong_language(["今天天气很好。", "This is an English sentence, not Chinese."], "zh") == [False, True]
    assert wrong_language(["Kurz.", "Das ist ein ganz normaler deutscher Satz."], "de") == [False, False]
    assert wrong_language(["This is clearly an English sentence about the weather."], "de") == [True]


def test_freedict_entries_become_headword_translation_pairs(tmp_path: Path) -> None:
    """A dictd dictionary as Debian's dict-freedict-deu-eng installs it: the index names each entry's offset and
    length (base64) in the gzipped dictionary."""
    import gzip

    from model.readers import read_freedict

    entries = [
        "00-database-info\nGerman - English\n",
        "Hund /hʊnt/ <masc, n, sg>\ndog <n>, hound <n>\n   Synonym: {Köter}\n",
        "Sie hatte viel Wut aufgestaut. /ziː/\nShe had stored up a lot of anger.\n",
        "etw. aufstauen /x/\nto dam sth. up\n",
        "Ases /a/ <neut, n, sg>\n [mus.] A <n>, A flat <n>\n",
    ]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def b64(n: int) -> str:
        out = ""
        while True:
            out = alphabet[n % 64] + out
            n //= 64
            if not n:
                return out

    data, index, at = b"", [], 0
    for entry in entries:
        raw = entry.encode("utf-8")
        index.append(f"{entry.split(' ', 1)[0].split(chr(10))[0]}\t{b64(at)}\t{b64(len(raw))}")
        data, at = data + raw, at + len(raw)
    with gzip.open(tmp_path / "fd.dict.dz", "wb") as f:
        f.write(data)
    (tmp_path / "fd.index").write_text("\n".join(index) + "\n", encoding="utf-8")
    assert read_freedict(tmp_path / "fd.dict.dz") == [
        ("Hund", "dog"),
        ("Sie hatte viel Wut aufgestaut.", "She had stored up a lot of anger."),
        ("Ases", "A"),
    ]
