"""Target words as the HTML path places them: closing punctuation apart from the word it ends (a tag around the
word then ends before it: "<b>good</b>.", not "<b>good.</b>"), written without a space before it; and the case of
a sentence's first letter as the source has it (a heading "Willkommen" is "Welcome", not "welcome")."""

from __future__ import annotations

import re
from collections.abc import Sequence

# punctuation that closes a word or sentence, written against the word before it
CLOSING = ".,;:!?…)]}»”’\"'%"
_TRAILING = re.compile(rf"^(.*?[^{re.escape(CLOSING)}])([{re.escape(CLOSING)}]+)$", re.S)


def is_glued(word: str) -> bool:
    """A word of closing punctuation only: no space before it."""
    return bool(word) and all(c in CLOSING for c in word)


def split_punctuation(words: Sequence[str], links: Sequence[int | None]) -> tuple[list[str], list[int | None]]:
    """Each word's closing punctuation as a word of its own, aligned to no source word (so a tag around the word
    does not take it in); the other words as they are."""
    out_words: list[str] = []
    out_links: list[int | None] = []
    for word, link in zip(words, links, strict=True):
        found = _TRAILING.match(word)
        if found:
            out_words += [found.group(1), found.group(2)]
            out_links += [link, None]
        else:
            out_words.append(word)
            out_links.append(link)
    return out_words, out_links


def _first_letter(text: str) -> int | None:
    return next((i for i, c in enumerate(text) if c.isalpha()), None)


def match_initial_case(source: str, text: str) -> str:
    """``text`` with its first letter upper-case when the source's first letter is (and both scripts have case):
    a one-word heading or list item, which the model translates as a lower-case word."""
    s, t = _first_letter(source), _first_letter(text)
    if s is None or t is None or not source[s].isupper() or not text[t].islower():
        return text
    return text[:t] + text[t].upper() + text[t + 1 :]
