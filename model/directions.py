"""Directions of a multilingual model: target-language tags, and the checks data preparation makes per pair.

One model translates between English, German and Chinese; each source begins with a tag naming the target language
(``<2en>``, ``<2de>``, ``<2zh>``), a user-defined SentencePiece symbol, as in Johnson et al. (2017), "Google's
Multilingual Neural Machine Translation System". The tag is part of the source text in the prepared files, so the
tokenizer, the trainer and the evaluator need nothing else to know the direction.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import cache

LANGUAGES = ("en", "de", "zh")
TAGS = {lang: f"<2{lang}>" for lang in LANGUAGES}
_TAG = re.compile(r"^<2([a-z]{2})> ")


def tagged(text: str, direction: str) -> str:
    """``text`` with the tag of ``direction``'s target (``de-en`` -> ``<2en> text``)."""
    return f"{TAGS[direction.split('-')[1]]} {text}"


def split_tag(text: str) -> tuple[str | None, str]:
    """(target language, text without its tag); (None, text) for an untagged line."""
    m = _TAG.match(text)
    return (m[1], text[m.end() :]) if m else (None, text)


def direction_of_line(source: str) -> str | None:
    """The direction of a tagged source line (``<2en> 你好`` -> ``zh-en``, ``<2de> Hello`` -> ``en-de``); None when it
    has no tag. Chinese is told by its script; into Chinese, German from English by lingua (the likelier of the two)."""
    target, text = split_tag(source)
    if target is None:
        return None
    if _cjk_share(text) >= 0.3:
        return f"zh-{target}"
    if target == "de":
        return "en-de"
    if target == "en":
        return "de-en"
    return f"{'de' if _likelier_german(text) else 'en'}-{target}"


def _likelier_german(text: str) -> bool:
    from lingua import Language

    return _detector().compute_language_confidence(text, Language.GERMAN) > _detector().compute_language_confidence(
        text, Language.ENGLISH
    )


def bleu_tokenizer(direction: str | None) -> str | None:
    """sacreBLEU's tokenizer for the direction's target: ``zh`` for Chinese, its default (13a) otherwise."""
    return "zh" if direction and direction.endswith("-zh") else None


def held_key(text: str) -> str:
    """A sentence as near-duplicate checks compare it: case, spaces, punctuation and symbols ignored."""
    kept = (ch for ch in unicodedata.normalize("NFKC", text).casefold() if unicodedata.category(ch)[0] in "LN")
    return "".join(kept)


def _cjk_share(text: str) -> float:
    letters = [ch for ch in text if unicodedata.category(ch)[0] == "L"]
    return sum("\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf" for ch in letters) / max(len(letters), 1)


LANGUAGE_ID_MIN_CHARS = 20  # shorter texts (greetings, dictionary words) are not judged
LANGUAGE_ID_CONFIDENCE = 0.9  # another language at least this likely: the side is in the wrong language


@cache
def _detector():
    from lingua import Language, LanguageDetectorBuilder

    languages = [Language.ENGLISH, Language.GERMAN, Language.FRENCH, Language.DUTCH, Language.SPANISH,
                 Language.ITALIAN, Language.PORTUGUESE, Language.CHINESE, Language.JAPANESE]  # fmt: skip
    return LanguageDetectorBuilder.from_languages(*languages).build()


def wrong_language(texts: Sequence[str], language: str) -> list[bool]:
    """For each text, whether it is not in ``language``: Chinese by its script (under half of its letters Chinese),
    German and English by lingua (another language at LANGUAGE_ID_CONFIDENCE or more); short texts pass."""
    if language == "zh":
        return [len(t) >= 4 and _cjk_share(t) < 0.5 for t in texts]
    judged = [i for i, t in enumerate(texts) if len(t) >= LANGUAGE_ID_MIN_CHARS]
    out = [False] * len(texts)
    if not judged:
        return out
    code = {"en": "ENGLISH", "de": "GERMAN"}[language]
    values = _detector().compute_language_confidence_values_in_parallel([texts[i] for i in judged])
    for i, ranked in zip(judged, values, strict=True):
        best = ranked[0]
        out[i] = best.language.name != code and best.value >= LANGUAGE_ID_CONFIDENCE
    return out
