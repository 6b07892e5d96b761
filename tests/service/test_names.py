"""Names (service/serving/names.py): the German finder (word-frequency lists), the Chinese finder (jieba's tags and
the CC-CEDICT name table), pinyin, and the warning of a name a translation lacks."""

from __future__ import annotations

import pytest

from engine.translation import Translation
from service.serving.names import find_names, is_german_name, name_table, pinyin_name
from service.serving.spans import find_spans, merged
from service.serving.terms import Use, constraints, settle, warnings


def _names(sentence: str, source: str) -> list[tuple[str, str]]:
    return [(u.found, u.target) for u in find_names(sentence, source)]


@pytest.mark.parametrize("word", ["Picciuto", "Merkel", "Trump", "Schmidt-Picciuto"])
def test_german_names(word: str) -> None:
    assert is_german_name(word)


NOT_NAMES = ["Haus", "Regierung", "Land", "Stammesrates", "Hochlandprovinz", "Die", "Ab", "Corona-Krise"]


@pytest.mark.parametrize("word", NOT_NAMES)
def test_german_nouns_and_compounds_are_no_names(word: str) -> None:
    assert not is_german_name(word)


def test_german_sentence_names_joined_and_genitive_left_off() -> None:
    sentence = "Die Kanzlerin Angela Merkel traf am Montag Herrn Picciuto im Haus der Regierung."
    assert _names(sentence, "de") == [("Angela Merkel", "Angela Merkel"), ("Picciuto", "Picciuto")]
    assert _names("Merkels Regierung ist stabil.", "de") == [("Merkels", "Merkel")]
    assert _names("Das Haus steht im Land.", "de") == []


def test_chinese_names_from_the_table_and_in_pinyin() -> None:
    found = find_names("马云于1999年在杭州创立了阿里巴巴。", "zh")
    assert [(u.found, u.target) for u in found] == [("马云", "Ma Yun"), ("杭州", "Hangzhou"), ("阿里巴巴", "Alibaba")]
    assert all(u.kind == "name" and u.copy for u in found)
    # a foreign person is found by the last word of the table's English, the full name also counts
    [trump] = [u for u in find_names("美国总统特朗普访问了日本。", "zh") if u.found == "特朗普"]
    assert trump.target == "Trump" and "Donald Trump" in trump.alternatives


def test_an_organisation_by_its_name_without_company() -> None:
    assert ("华为", "Huawei") in _names("华为公司的总部位于深圳。", "zh")


def test_pinyin_of_names_the_table_lacks() -> None:
    assert "王小明" not in name_table()
    assert pinyin_name("王小明", person=True) == "Wang Xiaoming"
    assert pinyin_name("欧阳娜娜", person=True) == "Ouyang Nana"  # a double surname
    assert pinyin_name("杭州", person=False) == "Hangzhou"
    assert ("王小明", "Wang Xiaoming") in _names("王小明去了学校。", "zh")


def test_the_table_credits_cc_cedict() -> None:
    from service.serving.names import TABLE

    header = TABLE.read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("#") and "CC-CEDICT" in header and "CC BY-SA 4.0" in header


def test_other_languages_have_no_names() -> None:
    assert find_names("Angela Merkel met Picciuto.", "en") == []


def test_a_name_inside_a_span_is_the_spans() -> None:
    sentence = "Folgen Sie @Picciuto heute."
    uses = merged(find_spans(sentence, "de", "en"), find_names(sentence, "de"), sentence)
    assert [(u.kind, u.found) for u in uses] == [("span", "@Picciuto")]


def test_a_name_is_left_to_the_model_and_named_when_missing() -> None:
    name = Use("Picciuto", "Picciuto", "Picciuto", copy=True, kind="name")
    # no constraint on the first search: the model writes it freely (prepared.py repair requires it afterwards)
    assert constraints([name], lambda text: [1, 2]) == ()
    kept = settle(Translation("Mr Picciuto came.", 0.0, [], []), [name], lambda text: text)
    assert kept.missing == [] and warnings(kept) == []
    lost = settle(Translation("Mr Pickle came.", 0.0, [], []), [name], lambda text: text)
    assert [w["code"] for w in warnings(lost)] == ["name_missing"] and "Picciuto" in warnings(lost)[0]["message"]
    alternative = Use("特朗普", "特朗普", "Trump", copy=True, kind="name", alternatives=("Donald Trump",))
    assert settle(Translation("Donald Trump came.", 0.0, [], []), [alternative], lambda t: t).missing == []


def test_restore_words_puts_stand_ins_back_once() -> None:
    from service.serving.terms import restore_words

    url = Use("https://a.de/x", "https://a.de/x", "https://a.de/x", copy=True, kind="span", stand_in="Y1")
    name = Use("Picciuto", "Picciuto", "Picciuto", copy=True, kind="name", stand_in="Y2")
    number = Use("1.250", "1.250", "1,250", copy=True, kind="number")
    words = ["go", "to", "Y1.", "with", "1.250", "cats", "and", "Y2", "Y1"]
    assert restore_words(words, [url, number, name]) == [
        "go", "to", "https://a.de/x.", "with", "1,250", "cats", "and", "Picciuto", "",
    ]  # fmt: skip
    assert restore_words(["onY2"], [name]) == ["on Picciuto"]


def test_a_word_the_vocabulary_has_in_small_letters_is_no_name(tmp_path) -> None:
    """A word both languages share (Statue -> statue) passes the word lists but is an ordinary word of the model's
    training text: a real SentencePiece model trained here decides, never a name."""
    import sentencepiece as spm

    from service.serving.names import in_small_letters

    text = tmp_path / "text.txt"
    text.write_text("\n".join(["die statue steht im park", "the statue is in the park", "wir sehen die statue"] * 50))
    prefix = str(tmp_path / "sp")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=prefix, vocab_size=20, hard_vocab_limit=False)

    class Tokenizer:
        sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))

    ordinary = in_small_letters(Tokenizer())
    assert ordinary("Statue") and not ordinary("Picciuto")
    sentence = "Die Statue von Picciuto steht hier."
    assert [u.found for u in find_names(sentence, "de")] == ["Statue", "Picciuto"]
    assert [u.found for u in find_names(sentence, "de", ordinary)] == ["Picciuto"]
