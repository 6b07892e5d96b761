"""Training-side augmentation for real-world text (issue 54 item 6): placeholders the model learns to copy, and
all-caps pairs.

Placeholders: a URL, an e-mail address or a number that a pair has on both sides (a number by its value, read in
each side's convention: German ``1.250.000`` and ``12,5`` are English ``1,250,000`` and ``12.5``) is replaced on
both sides by the same symbol, ``<x1>`` for the first such span of the source, ``<x2>`` for the next, up to five.
A model trained on such copies carries them through; the service then puts the span back (converted to the
target's convention for numbers), so the span is right by construction instead of spelled by the model.

All caps: the pair upper-cased on both sides (the source's script permitting), so that an all-caps sentence is not
a string of unknown pieces to the model.

Each augmented pair is an extra copy: the original stays in the mix.
"""

from __future__ import annotations

import re

from core.numbers import NUMBER, TIME_OR_DATE, number_value

PLACEHOLDERS = tuple(f"<x{i}>" for i in range(1, 6))
URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"']+[^\s<>\"'.,;:!?)\]]")
EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")


def _spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of the URLs, e-mail addresses and numbers of ``text``, in order, not overlapping."""
    found: list[tuple[int, int, str]] = []
    for kind, pattern in (("url", URL), ("email", EMAIL), ("time", TIME_OR_DATE), ("number", NUMBER)):
        for m in pattern.finditer(text):
            if not any(m.start() < end and start < m.end() for start, end, _ in found):
                found.append((m.start(), m.end(), kind))
    return sorted(found)


def _matches(a: str, a_lang: str, b: str, b_lang: str, kind: str) -> bool:
    if kind != "number":
        return a == b
    va, vb = number_value(a, a_lang), number_value(b, b_lang)
    return va is not None and va == vb


def with_placeholders(src: str, tgt: str, src_lang: str, tgt_lang: str) -> tuple[str, str] | None:
    """The pair with its shared spans replaced by placeholders (above), or None when it shares none."""
    if any(p in src or p in tgt for p in PLACEHOLDERS):
        return None
    target_spans = _spans(tgt)
    used: set[int] = set()
    pairs: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for start, end, kind in _spans(src):
        if len(pairs) == len(PLACEHOLDERS):
            break
        for j, (t_start, t_end, t_kind) in enumerate(target_spans):
            same = _matches(src[start:end], src_lang, tgt[t_start:t_end], tgt_lang, kind)
            if j not in used and t_kind == kind and same:
                used.add(j)
                pairs.append(((start, end), (t_start, t_end)))
                break
    if not pairs:
        return None
    new_src, new_tgt = src, tgt
    by_target = sorted(range(len(pairs)), key=lambda i: pairs[i][1][0], reverse=True)
    for i in sorted(range(len(pairs)), key=lambda i: pairs[i][0][0], reverse=True):  # right to left: offsets hold
        (start, end), _ = pairs[i]
        new_src = new_src[:start] + PLACEHOLDERS[i] + new_src[end:]
    for i in by_target:
        _, (start, end) = pairs[i]
        new_tgt = new_tgt[:start] + PLACEHOLDERS[i] + new_tgt[end:]
    return new_src, new_tgt


def all_caps(src: str, tgt: str) -> tuple[str, str] | None:
    """Both sides upper-cased, or None when neither side changes (Chinese on both sides, or already capitals)."""
    upper = (src.upper(), tgt.upper())
    return None if upper == (src, tgt) or upper[0] == src else upper
