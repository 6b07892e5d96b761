"""Spans of real-world text that must come through a translation unchanged, and numbers in the target's convention
(docs/real-world-text.md).

``find_spans(sentence, source, target)`` lists, in order, what a sentence must get (service/serving/terms.py
``Use``s), so that the glossary machinery places them (constrained search) and checks them afterwards:
- ``span``: URLs and e-mail addresses (linkify-it-py, the maintained port of markdown-it's link finder), file paths,
  @handles, #hashtags, version strings (``v2.3.1``, ``3.2.1``), identifiers mixing letters and digits
  (``A-2024-88731``, ``CVE-2024-1234``), inline code in backquotes, emoji: copied exactly;
- ``number``: numbers must be in the translation in the target language's convention (German ``1.250.000`` ->
  English ``1,250,000``, core/numbers.py): the model writes them freely, one it wrote in the source's convention is
  rewritten, and one missing is a ``number_mismatch`` warning naming it (forcing numbers into the search cost up to
  1.4 BLEU on newstest2018, docs/real-world-text.md); times and numeric dates get a stand-in, as spans do.
A request's own glossary terms and do-not-translate spans win over spans found here where they overlap.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from functools import cache

from core.numbers import NOT_A_QUANTITY, NUMBER, TIME_OR_DATE, number_value, written_in
from service.serving.terms import Use

# one pattern per kind of span, tried in this order (an earlier kind wins where two overlap)
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("code", re.compile(r"`[^`\n]+`")),
    ("path", re.compile(r"(?<![\w/])(?:~?/[\w.-]+(?:/[\w.-]+)+|[A-Za-z]:\\[\w.\\-]+)")),
    ("handle", re.compile(r"(?<![A-Za-z0-9_@])@[A-Za-z0-9_]{2,}")),
    ("hashtag", re.compile(r"(?<![\w#&])#[^\W\d_][\w]*")),
    # (the neighbours that end a span are ASCII: a version or code beside Chinese characters is still found)
    (
        "version",
        re.compile(
            r"(?<![A-Za-z0-9_.])v?\d+(?:\.\d+){2,}(?:-[\w.]+)?(?![A-Za-z0-9_.])"
            r"|(?<![A-Za-z0-9_.])v\d+(?:\.\d+)+(?![A-Za-z0-9_.])"
        ),
    ),
    # capitals and digits joined by hyphens, with at least one of each: A-2024-88731, CVE-2024-1234 (German number
    # compounds such as 1970-er or 100-prozentig have small letters: words the model translates)
    (
        "identifier",
        re.compile(
            r"(?<![A-Za-z0-9_-])(?=[A-Z0-9-]*\d)(?=[A-Z0-9-]*[A-Z])[A-Z0-9]+(?:-[A-Z0-9]+)+"
            r"(?![A-Za-z0-9_-])"
        ),
    ),
    ("emoji", re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\ufe0f\u200d]+")),
)


@cache
def _linkify():
    from linkify_it import LinkifyIt

    return LinkifyIt()


def _links(sentence: str) -> list[tuple[int, int]]:
    linkify = _linkify()
    if not linkify.pretest(sentence):
        return []
    return [(m.index, m.last_index) for m in linkify.match(sentence) or []]


def find_spans(sentence: str, source: str, target: str) -> list[Use]:
    """What ``sentence`` (in ``source``) must get in its ``target`` translation, in the order it appears (above)."""
    taken: list[tuple[int, int, Use]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e, _ in taken)

    def take(start: int, end: int, use: Use) -> None:
        if free(start, end):
            taken.append((start, end, use))

    for start, end in _links(sentence):
        text = sentence[start:end]
        take(start, end, Use(text, text, text, copy=True, kind="span"))
    for m in TIME_OR_DATE.finditer(sentence):
        take(m.start(), m.end(), Use(m.group(), m.group(), m.group(), copy=True, kind="number"))
    for kind, pattern in PATTERNS:
        for m in pattern.finditer(sentence):
            if kind == "version" and number_value(m.group(), source) is not None:  # 1.250.000: a German number
                continue
            take(m.start(), m.end(), Use(m.group(), m.group(), m.group(), copy=True, kind="span"))
    for m in NUMBER.finditer(sentence):
        text = m.group()
        if source == "de" and NOT_A_QUANTITY.match(sentence, m.end()):  # an ordinal, a compound: no check
            continue
        plain = unicodedata.normalize("NFKC", text)  # full-width digits (１２３) are ordinary ones in the target
        take(m.start(), m.end(), Use(text, text, written_in(plain, source, target) or plain, copy=True, kind="number"))
    return [use for _, _, use in sorted(taken, key=lambda t: t[0])]


def merged(given: list[Use], found: list[Use], sentence: str) -> list[Use]:
    """The request's own uses, then the spans found that overlap none of them, in the sentence's order."""
    if not found:
        return given
    if not given:
        return found
    claimed = [(m.start(), m.end()) for use in given for m in re.finditer(re.escape(use.found), sentence)]
    at = 0
    kept = []
    for use in found:
        start = sentence.find(use.found, at)
        at = max(at, start + 1)
        if not any(start < e and s < start + len(use.found) for s, e in claimed):
            kept.append(use)
    positions = {id(u): sentence.find(u.found) for u in given + kept}
    return sorted(given + kept, key=lambda u: positions[id(u)])


PLACEHOLDER = "<x{}>"  # the symbols of models trained to copy them (model/augment.py)
STAND_IN = "Y{}"  # what models without them copy best (measured on the shipped de-en model: docs/real-world-text.md)


def with_stand_ins(
    sentence: str, uses: list[Use], placeholders: bool, kinds: tuple[str, ...] = ("span",)
) -> tuple[str, list[Use]]:
    """The sentence with each found span, time and date (and, for a model with placeholder symbols, each number)
    replaced by a stand-in the model copies, and the uses with their stand-ins: the model translates the words
    around a placeholder instead of spelling a URL or an identifier, and the span is put back after decoding
    (terms.py ``settle``). A stand-in already in the sentence is skipped. ``kinds``: the uses replaced besides
    numbers (names too, where a translation lost them: prepared.py ``repair``)."""
    shown, out, n, at = sentence, [], 0, 0
    for use in uses:
        replace = use.kind in kinds or (use.kind == "number" and (placeholders or TIME_OR_DATE.fullmatch(use.found)))
        start = shown.find(use.found, at) if replace else -1
        if start < 0:
            out.append(use)
            continue
        n += 1
        while (PLACEHOLDER if placeholders else STAND_IN).format(n) in sentence:
            n += 1
        stand_in = (PLACEHOLDER if placeholders else STAND_IN).format(n)
        if placeholders and n > 5:  # the model knows five
            out.append(use)
            continue
        shown = shown[:start] + stand_in + shown[start + len(use.found) :]
        at = start + len(stand_in)
        out.append(dataclasses.replace(use, stand_in=stand_in))
    return shown, out


def has_placeholders(tokenizer) -> bool:
    """Whether the model's tokenizer has the placeholder symbols (a model trained with model/augment.py's)."""
    sp = tokenizer.sp
    return sp.piece_to_id(PLACEHOLDER.format(1)) != sp.unk_id()
