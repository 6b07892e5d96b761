"""Language detection, offline: lingua (lingua-language-detector), restricted to a set of ISO 639-1 codes.

The statistical models ship inside lingua's wheel: nothing is downloaded at run time. A detector is built
once per language set (``detector``); restricting it to the languages a server can use (MT_DETECT_LANGUAGES,
or the source languages of the loaded models) is both faster and more accurate than asking among all 75.

- ``detect(text, languages)``: (ISO 639-1 code, confidence in [0, 1]) of the most likely language.
- ``confidences(text, languages)``: every candidate with its confidence, most likely first.
- ``detect_among(text, candidates)``: the routing detector (service/serving/routing.py ``Detector``): a code
  among ``candidates``, or None for a text with no letters to go by.
- ``language_name(code)``: English name ("German"), for LibreTranslate's /languages.
- ``unserved(text, known)``: the language of a text in none of the ``known`` languages (French sent to a server
  of de, en and zh), told apart among WIDE_LANGUAGES; None when it may be one of them.
- ``latin_words(text)``: its Latin-script words; ``uncopied_latin(chinese, source)``: those of a Chinese text that
  its source lacks (a German word leaked into English->Chinese output, not a name copied from the source).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Sequence

from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

DEFAULT_LANGUAGES = ("de", "en", "zh")
_lock = threading.Lock()


class UnknownLanguage(ValueError):
    """A code lingua does not know (it knows 75 languages by their ISO 639-1 codes)."""


def _iso(code: str) -> IsoCode639_1:
    try:
        return IsoCode639_1.from_str(code.lower())
    except (ValueError, AttributeError):
        raise UnknownLanguage(f"unknown ISO 639-1 language code {code!r}") from None


def supported(code: str) -> bool:
    try:
        _iso(code)
    except UnknownLanguage:
        return False
    return True


def _key(languages: Iterable[str] | None) -> tuple[str, ...]:
    codes = tuple(sorted({c.lower() for c in (languages or DEFAULT_LANGUAGES)}))
    for code in codes:
        _iso(code)
    return codes


@functools.lru_cache(maxsize=16)
def _build(codes: tuple[str, ...]):
    isos = [_iso(c) for c in codes]
    if len(isos) == 1:  # lingua needs two languages; one candidate needs no detection
        return None
    return LanguageDetectorBuilder.from_iso_codes_639_1(*isos).with_preloaded_language_models().build()


def detector(languages: Iterable[str] | None = None):
    """The lingua detector of this language set (built once, about 1 s per few languages; thread-safe)."""
    key = _key(languages)
    with _lock:
        return _build(key)


def confidences(text: str, languages: Iterable[str] | None = None) -> list[tuple[str, float]]:
    """(code, confidence) for every language of the set, most likely first; confidences sum to 1, or are all 0
    for a text lingua cannot judge (no letters: digits, punctuation, emoji)."""
    key = _key(languages)
    found = detector(key)
    if found is None:
        return [(key[0], 1.0)]
    values = found.compute_language_confidence_values(text)
    return [(v.language.iso_code_639_1.name.lower(), float(v.value)) for v in values]


def detect(text: str, languages: Iterable[str] | None = None) -> tuple[str, float]:
    """(ISO 639-1 code, confidence in [0, 1]) of the most likely language of ``text`` among ``languages``
    (default: MT_DETECT_LANGUAGES' default, de/en/zh). A text with no letters gets the first code of the set
    with confidence 0."""
    ranked = confidences(text, languages)
    return ranked[0] if ranked and ranked[0][1] > 0 else (_key(languages)[0], 0.0)


def detect_among(text: str, candidates: Sequence[str]) -> str | None:
    """Routing detector: the most likely of ``candidates`` for ``text``, None when lingua has nothing to go by.
    Candidates lingua does not know are ignored (None when fewer than one known candidate remains)."""
    known = [c for c in candidates if supported(c)]
    if not known:
        return None
    code, confidence = detect(text, known)
    return code if confidence > 0 else None


# Languages a text sent to this server may be in, told apart to name a language no model serves: lingua's
# low-accuracy mode (trigrams only; 27 languages in about 40 MB, built in 0.3 s) instead of the detector of the
# served languages, which can only pick among those (French was called "en" or "de").
WIDE_LANGUAGES = (
    "ar", "cs", "da", "de", "el", "en", "es", "fa", "fi", "fr", "he", "hi", "hu", "id", "it", "ja", "ko", "nl", "pl",
    "pt", "ro", "ru", "sv", "tr", "uk", "vi", "zh",
)  # fmt: skip
# measured (issue 55) on 1,014 German sentences of Multi30k val, 1,000 of Tatoeba German and 1,000 of Tatoeba
# Chinese: no sentence named another language at 0.99 (2 of 3,014 at 0.9: Swedish for German); French sentences of
# a few words come out at 1.0
UNSERVED_MIN_CONFIDENCE = 0.99


@functools.lru_cache(maxsize=1)
def _wide():
    isos = [_iso(c) for c in WIDE_LANGUAGES]
    builder = LanguageDetectorBuilder.from_iso_codes_639_1(*isos).with_preloaded_language_models()
    return builder.with_low_accuracy_mode().build()


def unserved(text: str, known: Iterable[str]) -> tuple[str, float] | None:
    """(code, confidence) when ``text`` is surely in a language outside ``known`` (the served and detected
    languages), None otherwise (one of them, or too little text to tell)."""
    with _lock:
        wide = _wide()
    values = wide.compute_language_confidence_values(text)
    if not values:
        return None
    code, value = values[0].language.iso_code_639_1.name.lower(), float(values[0].value)
    return (code, value) if code not in set(known) and value >= UNSERVED_MIN_CONFIDENCE else None


def language_name(code: str) -> str:
    """English name of a language code ("de" -> "German"); the code itself when lingua does not know it."""
    try:
        return Language.from_iso_code_639_1(_iso(code)).name.title()
    except UnknownLanguage:
        return code


# the language_mismatch warning's least detector confidence, refitted on the general-domain validation splits
# (python -m export.language_check, docs/general-domain.md): false alarms on a model's own text are flat from 0.5 to
# 0.95 (0-0.3%), while wrong-language hits fall from 98.5-100% at 0.6 to 86-99% at 0.8 (the value before)
MISMATCH_MIN_CONFIDENCE = 0.6


def is_mismatch(found: tuple[str, float] | None, source_language: str, min_confidence: float) -> bool:
    """The language_mismatch rule (service/serving/quality.py): the detector names another language than the
    model's source with at least ``min_confidence``."""
    return found is not None and found[0] != source_language and found[1] >= min_confidence


_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]{2,}")


def latin_words(text: str) -> list[str]:
    """The Latin-script words (two letters or more) of ``text``, in order."""
    return _LATIN_WORD.findall(text)


def uncopied_latin(chinese: str, source: str) -> list[str]:
    """Latin-script words (two letters or more) of ``chinese`` that ``source`` does not hold, ignoring case: in a
    Chinese translation, names, acronyms and code copied from the source are right; a word that is not there is a
    word of another language the model wrote ("人 reparieren了一家房子" for "People repair the roof of a house")."""
    present = {w.casefold() for w in latin_words(source)}
    return list(dict.fromkeys(w for w in latin_words(chinese) if w.casefold() not in present))
