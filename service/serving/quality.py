"""What the service can say about a translation besides the translation: a confidence and warnings.

Warnings (``{"code", "message"}``, an empty list when there is nothing to say):
- ``language_mismatch``: the language detector says the text is not in the model's source language;
- ``truncated``: the translation stopped at its length limit (max_length, or 2 x source + 10) without ending;
- ``low_confidence``: the confidence is under LOW_CONFIDENCE;
- ``confidence_unavailable``: the model has a fitted confidence map, but the text was translated under glossary or
  do-not-translate constraints, which the map cannot judge (the confidence is left out);
- ``unknown_characters``: characters the tokenizer never saw went through byte fallback;
- ``multiple_sentences``: the text holds several sentences and split_sentences was off (the model was trained
  on single sentences);
- ``foreign_words``: a Chinese translation writes Latin-script words that the text does not hold (core/language.py
  ``uncopied_latin``): names and acronyms copied from the text are right, other words are another language's
  (multi 1's English->Chinese leaks German words: docs/model-card.md). Not judged under glossary or
  do-not-translate constraints, whose terms may be such words.
The confidence is the bundle's fitted map (core/confidence.py; manifest ``confidence``, or for another direction of a
multilingual bundle ``direction_confidence``: the model's ``confidence_map``) of the translation's mean
log-probability per token: the estimated probability that its chrF against a reference would be >= the
threshold it was fitted for. None when the bundle has no fitted map for the direction (a pivot never has one), for
an empty text, and for a translation decoded under glossary or do-not-translate constraints
(``Translation.constrained``): the forced subwords' low log-probabilities say nothing of its quality (every such
translation mapped to about 0), and the map was fitted on free output only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.confidence import confidence
from core.language import MISMATCH_MIN_CONFIDENCE, is_mismatch, uncopied_latin
from engine.decoding import TranslateOptions
from engine.translation import Translation
from service.models.registry import LoadedModel
from service.serving.segmentation import split_text

LOW_CONFIDENCE = 0.5
CONSTRAINED = (
    "no confidence for a translation placed under glossary or do_not_translate constraints: the forced subwords make "
    "the model's score no measure of its quality"
)
# detect(text, candidates) -> (ISO 639-1 code, its confidence) or None; core/language.py provides one
Identify = Callable[[str, Sequence[str]], "tuple[str, float] | None"]


@dataclass(frozen=True)
class QualityPolicy:
    """How translations are checked: the language detector and its candidates, and whether a text in another
    language than the model's source is refused (MT_LANGUAGE_MISMATCH=reject) or only warned about."""

    identify: Identify | None = None
    candidates: tuple[str, ...] = ()
    reject_mismatch: bool = False
    min_detect_confidence: float = MISMATCH_MIN_CONFIDENCE
    # unserved(text, known) -> (code, confidence) of a language outside ``known`` (core/language.py ``unserved``)
    unserved: Callable[[str, Sequence[str]], tuple[str, float] | None] | None = None


class LanguageMismatch(ValueError):
    """A text is not in the model's source language and the policy refuses such texts (422)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def mismatch(model: LoadedModel, text: str, policy: QualityPolicy) -> tuple[str, float] | None:
    """(detected language, detector confidence) when the detector is sure ``text`` is not in the model's source
    language; None otherwise (no detector, too little text to tell, or the right language)."""
    source_language = model.languages[0]
    if policy.identify is None or not policy.candidates or not text.strip():
        return None
    other = unserved_language(text, policy, [source_language])
    if other is not None:  # a language none of the candidates is: the detector among them would name a wrong one
        return other
    found = policy.identify(text, sorted({*policy.candidates, source_language}))
    return found if is_mismatch(found, source_language, policy.min_detect_confidence) else None


def unserved_language(text: str, policy: QualityPolicy | None, served: Sequence[str]) -> tuple[str, float] | None:
    """(code, confidence) when ``text`` is surely in none of the policy's candidates and ``served`` languages."""
    if policy is None or policy.unserved is None or not text.strip():
        return None
    return policy.unserved(text, sorted({*policy.candidates, *served}))


def check_languages(models: Sequence[LoadedModel], texts: Sequence[str], policy: QualityPolicy) -> None:
    """With reject_mismatch: LanguageMismatch for the first text whose language is not its model's source."""
    if not policy.reject_mismatch:
        return
    for i, (model, text) in enumerate(zip(models, texts, strict=True)):
        found = mismatch(model, text, policy)
        if found is not None:
            raise LanguageMismatch(
                i,
                f"the text looks like {found[0]} (detector confidence {found[1]:.2f}) but model {model.name} "
                f"translates from {model.languages[0]}; send it to a model for {found[0]}, or use "
                "source_language 'auto'",
            )


def _warning(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def unknown_characters(model: LoadedModel, text: str) -> list[str]:
    """Characters of ``text`` that the tokenizer spells out as UTF-8 bytes (it never saw them in training)."""
    spelled_in_bytes = model.engine.tokenizer.spelled_in_bytes
    return [c for c in dict.fromkeys(model.engine.normalize_source(text)) if not c.isspace() and spelled_in_bytes(c)]


def assess(
    model: LoadedModel,
    text: str,
    translation: Translation,
    options: TranslateOptions,
    policy: QualityPolicy | None = None,
    sentences: int = 1,
) -> tuple[float | None, list[dict[str, str]]]:
    """(confidence, warnings) of one translated text; ``sentences``: how many the text holds when it was
    translated whole (split_sentences off), else 1."""
    warnings: list[dict[str, str]] = []
    if not translation.token_ids:
        return None, warnings
    found = mismatch(model, text, policy) if policy is not None else None
    if found is not None:
        warnings.append(
            _warning(
                "language_mismatch",
                f"the text looks like {found[0]} (detector confidence {found[1]:.2f}), but model {model.name} "
                f"translates from {model.languages[0]}: expect a poor translation",
            )
        )
    if translation.truncated:
        limit = f"max_length {options.max_length}" if options.max_length else "2 x source subwords + 10"
        warnings.append(_warning("truncated", f"the translation stopped at its length limit ({limit}) before it ended"))
    params = model.confidence_map  # the direction's: a multilingual bundle has one per direction
    value = None
    if params and translation.constrained:
        warnings.append(_warning("confidence_unavailable", CONSTRAINED))
    elif params:
        value = round(confidence(translation.score, len(translation.token_ids), params), 4)
        if value < LOW_CONFIDENCE:
            warnings.append(
                _warning("low_confidence", f"confidence {value:.2f}: the model is unsure of this translation")
            )
    unknown = unknown_characters(model, text)
    if unknown:
        shown = "".join(unknown[:10]) + ("..." if len(unknown) > 10 else "")
        warnings.append(
            _warning("unknown_characters", f"{len(unknown)} character(s) the model never saw in training: {shown}")
        )
    if sentences > 1:
        warnings.append(
            _warning(
                "multiple_sentences",
                f"the text holds {sentences} sentences; the model was trained on single sentences "
                "(split_sentences translates them one by one)",
            )
        )
    foreign = [] if translation.constrained or model.languages[1] != "zh" else uncopied_latin(translation.text, text)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        warnings.append(
            _warning(
                "foreign_words",
                f"the Chinese translation writes {len(foreign)} word(s) in Latin script that the text does not hold: "
                f"{shown}; they may be another language's words left untranslated",
            )
        )
    return value, warnings


def text_assessment(
    model: LoadedModel,
    text: str,
    translation: Translation,
    options: TranslateOptions,
    policy: QualityPolicy | None,
    split: bool,
) -> tuple[float | None, list[dict[str, str]]]:
    """``assess`` of a plain text as every API translates it: split into sentences (``split``), or whole."""
    sentences = 1 if split else len(split_text(text, model.languages[0], True).sentences)
    return assess(model, text, translation, options, policy, sentences)


WARNINGS_HEADER = "X-MT-Warnings"


def warnings_header(warnings: Sequence[Sequence[dict[str, str]]]) -> str | None:
    """The X-MT-Warnings header of an answer's texts (protocols without room for them in the body, and everyone
    who reads headers only): ``<text index>:<code>`` pairs, comma-separated, in text order; None when none."""
    pairs = [f"{i}:{w['code']}" for i, found in enumerate(warnings) for w in found]
    return ",".join(pairs) or None
