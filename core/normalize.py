"""Text normalisation of training and evaluation pairs, one rule set for every corpus.

- Unicode NFC (composed umlauts: "u" + combining diaeresis and "ü" become one code point);
- typographic quotes and apostrophes to ASCII (" and '), dashes kept: the corpora mix both styles, and one
  style halves the ways the model has to learn to write the same word ("don't" / "don’t");
- whitespace: control characters and non-breaking or zero-width spaces to a space, runs of spaces to one,
  ends stripped;
- Chinese in Simplified script (OpenCC ``t2s``): Tatoeba mixes Traditional and Simplified sentences, the
  news and TICO-19 sets are Simplified, so one script doubles the examples every character gets.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import cache, partial

# the rule set below; a bundle whose manifest says "source_normalization": "1" was trained on text normalised so,
# and the engine normalises every source the same way before tokenizing (bundles without the field: as sent)
NORMALIZATION_VERSION = "1"

_QUOTES = str.maketrans(
    {
        "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u00ab": '"', "\u00bb": '"',
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2039": "'", "\u203a": "'",
        "\u00b4": "'", "\u0060": "'",
    }
)  # fmt: skip
_SPACES = re.compile(r"[\s\u00a0\u2000-\u200b\u202f\u205f\u3000\ufeff]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def normalize(text: str) -> str:
    """NFC, ASCII quotes, one space between words, no control characters."""
    text = unicodedata.normalize("NFC", text).translate(_QUOTES)
    return _SPACES.sub(" ", _CONTROL.sub(" ", text)).strip()


@cache
def _t2s():
    import opencc

    return opencc.OpenCC("t2s")


def to_simplified(text: str) -> str:
    """Traditional Chinese characters to Simplified (text in other scripts passes unchanged)."""
    return _t2s().convert(text)


def normalize_for(text: str, lang: str, simplify_chinese: bool = True) -> str:
    """:func:`normalize`, and for ``zh`` the Simplified script (unless ``simplify_chinese`` is off)."""
    text = normalize(text)
    return to_simplified(text) if lang == "zh" and simplify_chinese else text


def source_normalizer(version: str | None, language: str) -> Callable[[str], str]:
    """What the engine applies to a source before tokenizing: :func:`normalize_for` for the bundle's rule set
    version, the identity for a bundle that has none (trained on text as it came)."""
    if not version:
        return str
    if version != NORMALIZATION_VERSION:
        raise ValueError(f"source_normalization {version!r} is unknown here (this code has {NORMALIZATION_VERSION!r})")
    return partial(normalize_for, lang=language)


# what a character the vocabulary lacks may be written as instead, tried in order before NFKC (``fold_unknown``)
_EQUIVALENTS = {
    "\u2013": "-", "\u2014": "-", "\u2012": "-", "\u2015": "-", "\u2212": "-", "\u2026": "...",
    "\u3000": " ", "\u00a0": " ", "\u202f": " ", "\u2009": " ", "\u200b": "",
}  # fmt: skip


def fold_unknown(text: str, spelled_in_bytes: Callable[[str], bool]) -> str:
    """``text`` with each character the model's vocabulary lacks (``spelled_in_bytes``) written as an equivalent it
    has, where there is one: typographic quotes as ASCII, dashes as "-", the ellipsis as "...", wide and narrow
    spaces as a space, full-width forms and other compatibility characters by NFKC (``＂`` -> ``"``). Only characters
    the model would otherwise see as bytes change, so a model that knows a character keeps it as written."""
    if text.isascii():
        return text
    out = []
    for ch in text:
        if ch.isascii() or not spelled_in_bytes(ch):
            out.append(ch)
            continue
        for candidate in (ch.translate(_QUOTES), _EQUIVALENTS.get(ch), unicodedata.normalize("NFKC", ch)):
            known = candidate is not None and not any(spelled_in_bytes(c) for c in candidate if c != " ")
            if known and candidate != ch:
                out.append(candidate)
                break
        else:
            out.append(ch)
    return "".join(out)
