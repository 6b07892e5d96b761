"""Terminology of a request: glossary terms the translation must use and spans it must copy (docs/glossaries.md).

``Terms`` holds a request's glossary (source term -> target term) and its do-not-translate spans. For each
sentence, ``Terms.find`` lists what applies to it (``Use``: the source found and the target it requires), and
``constraints`` turns those into the engine's constraints (engine/constrained.py). After decoding,
``settle`` restores do-not-translate spans the tokenizer spells differently and names what is missing.

Matching a source term in a sentence:
- whole words only (no match inside a longer word), any run of whitespace between a term's words;
- case is ignored, except for a term word written all in capitals with two or more letters (an acronym like
  "EU" or "USB"), which matches only in capitals;
- German sources (``de``): the last word of a term of four or more letters also matches with a noun ending
  (-e, -en, -er, -ern, -es, -n, -ns, -s, -se, -sen, -ses, -nen) and with an umlaut on its last a, o, u or au:
  "Arzt" matches "Arztes", "Ärzte", "Ärzten"; "Haus" matches "Häuser"; "Kundin" matches "Kundinnen". Shorter
  terms match as written (case aside), as a short stem plus an ending is too often another word ("Ei"/"Eis");
- Chinese sources (``zh``): no word boundaries (the script has no spaces): the term matches anywhere;
- the longest term wins where two overlap; do-not-translate spans win over glossary terms.
The target term is required as written; a target term that begins with a lower-case letter may also come
capitalised (at the start of a sentence). The decoder may add letters after it (an English plural:
"physician" -> "physicians"), as the term is placed by its subwords and the model continues from there.
Do-not-translate spans match exactly (case and all) and must come back exactly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.constrained import Constraint
from engine.translation import Translation
from service.serving.casing import recased

GERMAN_ENDINGS = ("e", "en", "er", "ern", "es", "n", "ns", "s", "se", "sen", "ses", "nen")
MIN_INFLECTED_LETTERS = 4
_UMLAUT = {"au": "äu", "a": "ä", "o": "ö", "u": "ü", "Au": "Äu", "A": "Ä", "O": "Ö", "U": "Ü"}


def _umlauted(word: str) -> str | None:
    """The word with an umlaut on its last a, o, u (or au), or None when it has none to take."""
    for i in range(len(word) - 1, -1, -1):
        if word[i] in "aouAOU":
            if word[i] in "uU" and i > 0 and word[i - 1] in "aA":  # "au" -> "äu"
                return word[: i - 1] + _UMLAUT[word[i - 1 : i + 1]] + word[i + 1 :]
            return word[:i] + _UMLAUT[word[i]] + word[i + 1 :]
        if word[i] in "äöüÄÖÜ":
            return None
    return None


def _word_pattern(word: str, last: bool, language: str) -> str:
    acronym = len(word) >= 2 and word.isupper()
    if last and language == "de" and len(word) >= MIN_INFLECTED_LETTERS and not acronym:
        stems = [re.escape(word)]
        umlaut = _umlauted(word)
        if umlaut is not None:
            stems.append(re.escape(umlaut))
        endings = "|".join(GERMAN_ENDINGS)
        core = f"(?:{'|'.join(stems)})(?:{endings})?"
    else:
        core = re.escape(word)
    return f"(?-i:{core})" if acronym else core


def source_pattern(term: str, language: str) -> re.Pattern[str]:
    """The regular expression that finds ``term`` in a sentence of ``language`` (the rules in the docstring)."""
    words = term.split()
    body = r"\s+".join(_word_pattern(w, i == len(words) - 1, language) for i, w in enumerate(words))
    if language == "zh":
        return re.compile(body, re.IGNORECASE)
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


def target_forms(term: str) -> list[str]:
    """The target term as written, and capitalised when it begins with a lower-case letter."""
    forms = [term]
    if term[:1].islower():
        forms.append(term[:1].upper() + term[1:])
    return forms


class TermsError(ValueError):
    """A glossary or span the request cannot use (422); ``field`` names the request field to change."""

    def __init__(self, message: str, field: str = "glossary") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Use:
    """One thing a sentence must get: a glossary term (``copy`` False) or a span to copy (``copy`` True)."""

    source: str  # the term or span as given
    found: str  # the text it matched in the sentence
    target: str  # what the translation must hold
    copy: bool = False
    # "": the request's glossary term or do-not-translate span; "span" / "number": found in the sentence
    # (spans.py); "name": a name found in it (names.py); "casing": no text, the sentence's casing to give the
    # translation back (casing.py)
    kind: str = ""
    stand_in: str = ""  # what the source shows instead of ``found`` (spans.py with_stand_ins); "" where nothing
    alternatives: tuple[str, ...] = ()  # other forms of ``target`` that count as present (a name's, names.py)


@dataclass
class Terms:
    """A request's glossary (source term -> target term, in order) and do-not-translate spans."""

    glossary: dict[str, str] = field(default_factory=dict)
    do_not_translate: list[str] = field(default_factory=list)
    pair: tuple[str, str] | None = None  # a stored glossary's (source, target) languages; None: any model
    glossary_id: str | None = None
    _patterns: dict[tuple[str, str], re.Pattern[str]] = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return bool(self.glossary or self.do_not_translate)

    def check_pair(self, model: str, languages: tuple[str, str]) -> None:
        """TermsError when a stored glossary is for another language pair than the model that translates."""
        if self.pair is not None and tuple(languages) != self.pair:
            raise TermsError(
                f"glossary {self.glossary_id} is for {self.pair[0]}->{self.pair[1]} but model {model} translates "
                f"{languages[0]}->{languages[1]}; use a glossary of that pair or name the languages",
                "glossary_id",
            )

    def find(self, sentence: str, language: str) -> list[Use]:
        """What applies to ``sentence`` (source ``language``), in the order it appears there."""
        taken: list[tuple[int, int, Use]] = []

        def free(start: int, end: int) -> bool:
            return all(end <= s or start >= e for s, e, _ in taken)

        for span in sorted(set(self.do_not_translate), key=len, reverse=True):
            for m in re.finditer(re.escape(span), sentence):
                if free(m.start(), m.end()):
                    taken.append((m.start(), m.end(), Use(span, span, span, copy=True)))
        for term in sorted(self.glossary, key=len, reverse=True):
            key = (term, language)
            if key not in self._patterns:
                self._patterns[key] = source_pattern(term, language)
            for m in self._patterns[key].finditer(sentence):
                if free(m.start(), m.end()):
                    taken.append((m.start(), m.end(), Use(term, m.group(), self.glossary[term])))
        uses: list[Use] = []
        for _, _, use in sorted(taken, key=lambda t: t[0]):
            if use not in uses or use.copy:  # a term found twice is placed once; a span found twice, twice
                uses.append(use)
        return uses


def constraints(uses: Sequence[Use], encode) -> tuple[Constraint, ...]:
    """The engine's constraints of a sentence's uses (``encode``: text -> target subword ids)."""
    out = []
    for use in uses:
        # casing is no text to place; a number without a stand-in is left to the model, written in the target's
        # convention afterwards and checked (forcing numbers cost 1.4 BLEU on newstest2018: docs/real-world-text.md);
        # so is a name, until a translation lacks it (prepared.py repair)
        if use.kind == "casing" or (use.kind in ("number", "name") and not use.stand_in):
            continue
        forms = [use.stand_in] if use.stand_in else [use.target] if use.copy else target_forms(use.target)
        alternatives = tuple(dict.fromkeys(tuple(encode(f)) for f in forms if encode(f)))
        if alternatives:
            out.append(Constraint(alternatives, "" if use.copy else use.found))
    return tuple(out)


def holds(text: str, use: Use) -> bool:
    """Whether a translation holds what ``use`` asks: the span exactly, or the target term (either form) starting
    at a word boundary."""
    if use.kind == "casing":
        return True
    if use.copy:
        return use.target in text or any(a in text for a in use.alternatives)
    return any(re.search(rf"(?<!\w){re.escape(f)}", text) for f in target_forms(use.target))


def recase(text: str, uses: Sequence[Use]) -> str:
    """A lower-case target term is written as given, but capitalised where it begins the text (after any opening
    punctuation): the search may place either form anywhere."""
    lead = len(text) - len(text.lstrip(" \"'“„«¿¡([")) if text else 0
    for use in uses:
        forms = target_forms(use.target)
        if use.copy or use.kind == "casing" or len(forms) < 2:
            continue
        given, capital = forms
        for m in list(re.finditer(rf"(?<!\w)(?:{re.escape(given)}|{re.escape(capital)})", text)):
            wanted = capital if m.start() == lead else given
            text = text[: m.start()] + wanted + text[m.end() :]
    return text


def recase_words(words: list[str], uses: Sequence[Use]) -> list[str]:
    """``recase`` of a translation given as its words (HTML and documents render words, not the text; a word may
    hold spaces): the words joined by spaces, recased, and cut again where they were (recasing keeps the length;
    as given in the rare case it does not, e.g. a capital that is two letters)."""
    if not uses:
        return words
    text = " ".join(words)
    cased = recase(text, uses)
    if len(cased) != len(text):
        return words
    out, at = [], 0
    for word in words:
        out.append(cased[at : at + len(word)])
        at += len(word) + 1
    return out


def restore_words(words: list[str], uses: Sequence[Use]) -> list[str]:
    """``settle``'s restoring for a translation given as its words (HTML and documents render the words the
    decoded subwords make, not the settled text): the first word holding a stand-in gets its span, number or name
    back, a stand-in repeated is dropped (its word left empty where it was only that), and a number written in the
    source's convention gets the target's."""
    out = list(words)
    for use in uses:
        if use.stand_in and use.stand_in != use.target:
            hits = [i for i, w in enumerate(out) if use.stand_in in w]
            for k, i in enumerate(hits):
                at = out[i].find(use.stand_in)
                name = _spaced(out[i], at, len(use.stand_in), use.target) if use.kind == "name" else use.target
                out[i] = out[i][:at] + (name if k == 0 else "") + out[i][at + len(use.stand_in) :]
        elif use.kind == "number" and not any(use.target in w for w in out):
            hit = next((i for i, w in enumerate(out) if use.found in w), None)
            if hit is not None:
                out[hit] = out[hit].replace(use.found, use.target, 1)
    return out


def _spaced(text: str, at: int, length: int, name: str) -> str:
    """A name put in place of its stand-in, with a space where the model wrote the stand-in against a letter or
    digit ("onY1" -> "on Ma Yun")."""
    before = " " if at > 0 and text[at - 1].isalnum() else ""
    after = " " if at + length < len(text) and text[at + length].isalnum() else ""
    return before + name + after


def settle(t: Translation, uses: Sequence[Use], render) -> Translation:
    """After decoding: a span the tokenizer renders differently (``render``: text -> decode(encode(text))) is
    written back as given, a lower-case term gets its case (``recase``); the uses the text still lacks go to
    ``missing``; a translation under the request's own terms is marked ``constrained`` (its score is no measure of
    its quality: forced words the model would not choose). Spans found in the sentence (spans.py) leave it
    unmarked: what is forced there is a stand-in the model copies or a number it was given."""
    if not uses:
        return t
    t.constrained = t.constrained or any(use.kind == "" for use in uses)

    def restore(text: str) -> str:
        for use in uses:
            if use.stand_in:  # the span back in place of its stand-in; a stand-in the model repeated is dropped
                first = text.find(use.stand_in)
                if first >= 0:
                    target = _spaced(text, first, len(use.stand_in), use.target) if use.kind == "name" else use.target
                    text = text[:first] + target + text[first + len(use.stand_in) :].replace(use.stand_in, "")
                    text = re.sub(r" {2,}", " ", text)
                continue
            if use.kind == "number" and use.target not in text and use.found in text:  # 81.360 -> 81,360
                text = text.replace(use.found, use.target, 1)
                continue
            if use.copy and use.target not in text:
                shown = render(use.target).strip()
                if shown and shown in text:
                    text = text.replace(shown, use.target, 1)
        return text

    t.text = restore(t.text)
    t.hypotheses = [(restore(text), score, ids) for text, score, ids in t.hypotheses]
    t.text = recase(t.text, uses)
    t.hypotheses = [(recase(text, uses), score, ids) for text, score, ids in t.hypotheses]
    t.missing = [use for use in dict.fromkeys(uses) if not holds(t.text, use)]
    for use in uses:
        if use.kind == "casing":  # the source sentence's all caps or Title Case (casing.py)
            t.text = recased(t.text, use.target)
            t.hypotheses = [(recased(text, use.target), score, ids) for text, score, ids in t.hypotheses]
    return t


def warnings(t: Translation) -> list[dict[str, str]]:
    """The warnings of what a translation lacks: ``glossary_term_missing`` for a glossary term the search could
    not place, ``do_not_translate_missing`` for a span it could not copy (quality.py's warning shape)."""
    out = []
    for use in t.missing:
        if use.kind == "number":
            message = f"the number {use.found!r} (as {use.target!r}) is not in the translation"
            out.append({"code": "number_mismatch", "message": message})
        elif use.kind == "name":
            message = f"the name {use.found!r} (as {use.target!r}) is not in the translation"
            out.append({"code": "name_missing", "message": message})
        elif use.kind == "span":
            message = f"the span {use.found!r} (a URL, address, code or name kept as written) is not in the translation"
            out.append({"code": "protected_span_missing", "message": message})
        elif use.copy:
            message = f"the span {use.source!r} could not be copied into the translation"
            out.append({"code": "do_not_translate_missing", "message": message})
        else:
            message = f"glossary term {use.source!r} (found as {use.found!r}) -> {use.target!r} is not in the text"
            out.append({"code": "glossary_term_missing", "message": message})
    return out
