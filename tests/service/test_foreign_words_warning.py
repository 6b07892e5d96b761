"""The ``foreign_words`` warning (service/serving/quality.py ``assess``): a Chinese translation that writes Latin-script
words its text lacks, as multi 1's English->Chinese writes German ones. A unit test of ``assess``: the model it is
given is a stand-in with only what ``assess`` reads (its languages, confidence map and tokenizer)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.decoding import TranslateOptions
from engine.translation import Translation
from service.serving.quality import assess


def _model(source: str, target: str) -> SimpleNamespace:
    tokenizer = SimpleNamespace(spelled_in_bytes=lambda ch: False)
    engine = SimpleNamespace(tokenizer=tokenizer, normalize_source=lambda text: text)
    return SimpleNamespace(name="multi", languages=(source, target), confidence_map=None, engine=engine)


def _codes(target: str, text: str, translated: str, constrained: bool = False) -> list[dict[str, str]]:
    translation = Translation(text=translated, score=-1.0, token_ids=[5, 6], source_ids=[7, 2], constrained=constrained)
    return assess(_model("en", target), text, translation, TranslateOptions())[1]


def test_a_german_word_in_chinese_is_named():
    [warning] = _codes("zh", "People repair the roof of a house.", "人 reparieren了一家房子。")
    assert warning["code"] == "foreign_words" and "reparieren" in warning["message"]


@pytest.mark.parametrize(
    ("target", "text", "translated", "constrained"),
    [
        ("zh", "I wrote an API in Python.", "我用Python写了一个API。", False),  # copied from the text
        ("zh", "People repair the roof.", "人们修理屋顶。", False),
        ("de", "The fence is white.", "Der Zaun ist weiß.", False),  # only Chinese is judged
        ("zh", "Open the cloud console.", "打开Cloud控制台。", True),  # a glossary may have put it there
    ],
)
def test_no_warning_where_latin_words_are_right(target, text, translated, constrained):
    assert _codes(target, text, translated, constrained) == []
