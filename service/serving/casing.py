"""All-caps and Title-Case sentences: translated as the model knows them (truecased), given their casing back.

A model trained on ordinary text cuts ``ACHTUNG: BETRETEN VERBOTEN!`` into rare pieces and translates it badly. A
sentence whose letters are all capitals (four or more of them), or whose words (three or more) all begin with one,
is truecased first: each word is written in whichever of its lower-case and capitalised forms the model's
tokenizer cuts into fewer pieces (its frequent form: ``Baustelle``, ``verboten``; ``ss`` also tried as ``ß``, which
capitals write as ``SS``), the first word capitalised. The
translation then gets the sentence's casing back: all capitals, or each word capitalised. Chinese has no case:
sentences into Chinese keep the model's output, and Chinese sources never match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

MIN_CAPS_LETTERS = 4
MIN_TITLE_WORDS = 3
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def casing_of(sentence: str) -> str | None:
    """``"upper"`` for an all-caps sentence, ``"title"`` for a Title-Case one, None otherwise."""
    letters = [ch for ch in sentence if ch.isalpha() and ch.lower() != ch.upper()]  # letters that have a case
    if len(letters) >= MIN_CAPS_LETTERS and all(ch.isupper() for ch in letters):
        return "upper"
    words = _WORD.findall(sentence)
    cased = [w for w in words if w[0].lower() != w[0].upper()]
    if len(cased) >= MIN_TITLE_WORDS and all(w[0].isupper() and not w.isupper() for w in cased):
        return "title"
    return None


def truecased(sentence: str, pieces: Callable[[str], Sequence[int]]) -> str:
    """Each word in its form with the fewest pieces (``pieces``: text -> token ids), the first one capitalised."""
    first = True

    def form(m: re.Match[str]) -> str:
        nonlocal first
        word = m.group()
        spellings = [word.lower()]
        if "ss" in spellings[0]:  # capitals write ß as SS: SCHLIESSEN is schließen
            spellings.append(spellings[0].replace("ss", "ß"))
        forms = [f for s in spellings for f in (s, s[:1].upper() + s[1:])]  # lower, capitalised; ties: the first
        costs = [len(pieces(f)) for f in forms]
        if first:  # the sentence's first word is capitalised whatever its frequent form
            forms, costs = forms[1::2], costs[1::2]
        first = False
        return forms[costs.index(min(costs))]

    return _WORD.sub(form, sentence)


def recased(text: str, casing: str | None) -> str:
    """A translation given the source sentence's ``casing`` back."""
    if casing == "upper":
        return text.upper()
    if casing == "title":
        return _WORD.sub(lambda m: m.group()[:1].upper() + m.group()[1:], text)
    return text
