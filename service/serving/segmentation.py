"""Paragraphs and line lists: split a text into sentences, translate them as one batch, put the text back together.

The model was trained on single sentences; a paragraph is split with sentencex (a maintained rule-based
segmenter, ~300 languages; see docs/benchmarks.md for its accuracy next to pysbd's) and each sentence is
translated on its own. Everything that is not a sentence is kept verbatim: line breaks (N lines in, N lines
out), blank lines, leading and trailing whitespace of the text and of each line. Between two sentences of one
line the original gap is kept, except that a target language written without spaces (Chinese, Japanese, Thai)
drops a gap of spaces and one written with spaces gets a space where the source had none.

Pure functions, no model: ``split_text`` -> a ``Layout`` (the sentences and what lies between them), ``join`` and
``merge`` put the translations back in it. The serving layer's use of them, tokenizing and queueing the sentences,
is service/serving/prepared.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import sentencex

from core.tokenizer import EOS_ID
from engine.translation import Translation

NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo"})  # written without spaces between words
_HORIZONTAL_SPACE = re.compile(r"[^\S\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]*")
_LINE_BREAK = re.compile(r"[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
NO_NEWLINES = "nonewlines"  # split at punctuation only: a line break is a space inside a sentence (DeepL's mode)

# A part of a text: ("text", verbatim), ("gap", verbatim whitespace between two sentences of a line),
# or ("sentence", index into Layout.sentences).
Part = tuple[str, str | int]


@dataclass(frozen=True)
class Layout:
    parts: tuple[Part, ...]
    sentences: tuple[str, ...]


def segment(text: str, language: str) -> list[str]:
    """Sentences of one line of text (no line breaks), stripped, in order."""
    return [s.strip() for s in sentencex.segment(language, text) if s.strip()]


def split_text(text: str, language: str, split: bool | str = True) -> Layout:
    """The sentences of ``text`` and what lies between them. ``split=False``: the whole text is one sentence
    (the behaviour before sentence splitting: nothing is stripped or kept aside); ``split="nonewlines"``:
    sentences end at punctuation only (``split_across_lines``)."""
    if split == NO_NEWLINES:
        return split_across_lines(text, language)
    if not split:
        return Layout((("sentence", 0),), (text,))
    parts: list[Part] = []
    sentences: list[str] = []
    for line in text.splitlines(keepends=True):
        content = line.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
        ending = line[len(content) :]
        body = content.strip()
        if not body:
            parts.append(("text", line))
            continue
        start = content.index(body)
        parts.append(("text", content[:start]))
        cursor, found = 0, []
        for sentence in segment(body, language):
            at = body.find(sentence, cursor)
            if at < 0:  # the segmenter changed the text: keep the line whole
                found = [(0, body)]
                break
            found.append((at, sentence))
            cursor = at + len(sentence)
        for k, (at, sentence) in enumerate(found):
            if k:
                previous_end = found[k - 1][0] + len(found[k - 1][1])
                parts.append(("gap", body[previous_end:at]))
            parts.append(("sentence", len(sentences)))
            sentences.append(sentence)
        parts.append(("text", content[start + len(body) :] + ending))
    return Layout(tuple(p for p in parts if p != ("text", "")), tuple(sentences))


def split_across_lines(text: str, language: str) -> Layout:
    """Sentences found as if every line break were a space (a sentence may run over several lines; the model reads
    it as one line); what lies between two sentences is kept verbatim, line breaks and all."""
    body = text.strip()
    if not body:
        return Layout((("text", text),) if text else (), ())
    start = text.index(body)
    flat = _LINE_BREAK.sub(" ", body)  # one space per break character: offsets into ``flat`` are offsets into ``body``
    parts: list[Part] = [("text", text[:start])]
    sentences: list[str] = []
    cursor = 0
    for sentence in segment(flat, language):
        at = flat.find(sentence, cursor)
        if at < 0:  # the segmenter changed the text: one sentence
            return Layout(
                tuple(p for p in (("text", text[:start]), ("sentence", 0), ("text", text[start + len(body) :]))
                      if p != ("text", "")),
                (flat,),
            )  # fmt: skip
        if sentences:
            between = body[cursor:at]
            parts.append(("text" if _LINE_BREAK.search(between) else "gap", between))
        parts.append(("sentence", len(sentences)))
        sentences.append(sentence)
        cursor = at + len(sentence)
    parts.append(("text", body[cursor:] + text[start + len(body) :]))
    return Layout(tuple(p for p in parts if p != ("text", "")), tuple(sentences))


def gap(between: str, target_language: str) -> str:
    """What goes between two translated sentences of one line, for what was ``between`` them in the source."""
    no_space = target_language in NO_SPACE_LANGUAGES
    if _HORIZONTAL_SPACE.fullmatch(between) is None:  # a gap with other characters (the segmenter's choice): keep it
        return between
    if no_space:
        return ""
    return between or " "


def join(layout: Layout, translations: Sequence[str], target_language: str) -> str:
    """The text again, with each sentence replaced by its translation."""
    out = []
    for kind, value in layout.parts:
        if kind == "sentence":
            out.append(translations[value].strip() if len(layout.parts) > 1 else translations[value])
        elif kind == "gap":
            out.append(gap(value, target_language))  # type: ignore[arg-type]
        else:
            out.append(value)
    return "".join(out)  # type: ignore[arg-type]


def _block_diagonal(parts: Sequence[Translation]) -> np.ndarray | None:
    """Cross-attention of the sentences as one (layers, heads, target, source) matrix, zero across sentences."""
    shaped = [p.attention for p in parts if p.attention is not None]
    if not shaped:
        return None
    layers, heads = shaped[0].shape[:2]
    rows, cols = sum(len(p.token_ids) for p in parts), sum(len(p.source_ids) for p in parts)
    out = np.zeros((layers, heads, rows, cols), dtype=shaped[0].dtype)
    r = c = 0
    for p in parts:
        t, s = len(p.token_ids), len(p.source_ids)
        if p.attention is not None:
            out[:, :, r : r + t, c : c + s] = p.attention[:, :, :t, :s]
        r, c = r + t, c + s
    return out


def merge(layout: Layout, parts: Sequence[Translation], target_language: str, num_hypotheses: int = 1) -> Translation:
    """One Translation for a text from its sentences' translations: the joined text, the sum of the scores,
    the subwords one sentence after the other (each source sentence with its </s>), n-best lists joined rank by
    rank (a sentence with fewer hypotheses repeats its last), cross-attention block-diagonal."""
    if len(parts) == 1 and layout.parts == (("sentence", 0),):
        return parts[0]
    if not parts:  # nothing to translate: empty, or only whitespace
        text = join(layout, [], target_language)
        return Translation(text, 0.0, [], [EOS_ID], [(text, 0.0, [])] if num_hypotheses > 1 else [])
    text = join(layout, [p.text for p in parts], target_language)
    hypotheses = []
    if num_hypotheses > 1:
        ranks = max(len(p.hypotheses) for p in parts)
        for r in range(ranks):
            chosen = [
                p.hypotheses[min(r, len(p.hypotheses) - 1)] if p.hypotheses else (p.text, p.score, p.token_ids)
                for p in parts
            ]
            hypotheses.append(
                (
                    join(layout, [h[0] for h in chosen], target_language),
                    sum(h[1] for h in chosen),
                    [i for h in chosen for i in h[2]],
                )
            )
    return Translation(
        truncated=any(p.truncated for p in parts),
        text=text,
        score=float(sum(p.score for p in parts)),
        token_ids=[i for p in parts for i in p.token_ids],
        source_ids=[i for p in parts for i in p.source_ids],
        hypotheses=hypotheses,
        attention=_block_diagonal(parts),
        missing=[use for p in parts for use in p.missing],
        constrained=any(p.constrained for p in parts),
    )
