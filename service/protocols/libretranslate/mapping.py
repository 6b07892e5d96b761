"""LibreTranslate's API on our models: translate (with "auto" sources and alternatives), detect, languages.

A request names a language pair; the model serving it translates (service/serving/routing.py). With
``source: "auto"`` each text's language is detected (core/language.py) among the languages served into
``target``, and the texts go to their models. Texts are split into sentences and lines
(service/serving/segmentation.py) and HTML keeps its markup (service/serving/html.py); the work goes through
each model's scheduler like /v1's.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core import language
from engine.decoding import TranslateOptions
from service.models.registry import LoadedModel, Registry
from service.serving.context import RequestContext
from service.serving.html import plain_text
from service.serving.prepared import prepare
from service.serving.quality import check_languages, text_assessment, unserved_language
from service.serving.routing import UnservedPair, route

_TAG = re.compile(r"<[^>]*>")


@dataclass
class Translated:
    text: str
    alternatives: list[str]
    detected: dict[str, Any] | None  # {"confidence": 0..100, "language": code} for source "auto"
    warnings: list[dict[str, str]] | None = None  # /v1's warnings (plain text; HTML is not assessed)


def languages(registry: Registry) -> list[dict[str, Any]]:
    """LibreTranslate's /languages: every language served as a source or a target, with the targets of each."""
    pairs = registry.pairs()
    codes = sorted({c for pair in pairs for c in pair})
    return [
        {"code": c, "name": language.language_name(c), "targets": sorted({t for s, t in pairs if s == c})}
        for c in codes
    ]


async def detect(text: str, languages_: Sequence[str]) -> list[dict[str, Any]]:
    """LibreTranslate's /detect: candidates, most likely first, confidence in percent."""
    ranked = await asyncio.to_thread(language.confidences, text, languages_)
    return [{"confidence": round(100 * value, 2), "language": code} for code, value in ranked]


async def _detect_sources(
    registry: Registry, texts: Sequence[str], target: str, fmt: str, detect_languages: Sequence[str]
) -> tuple[list[str], list[dict[str, Any]]]:
    candidates = sorted({s for s, t in registry.pairs() if t == target})
    if not candidates:
        raise UnservedPair(f"no model translates into {target}", registry.pairs(), "target")
    found_codes, found = [], []
    for text in texts:
        plain = _TAG.sub(" ", text) if fmt == "html" else text
        if len(candidates) == 1:  # nothing to choose; still say how sure the detector is among its languages
            ranked = dict(await asyncio.to_thread(language.confidences, plain, {*candidates, *detect_languages}))
            code, confidence = candidates[0], ranked.get(candidates[0], 0.0)
        else:
            code, confidence = await asyncio.to_thread(language.detect, plain, candidates)
        found_codes.append(code)
        found.append({"confidence": round(100 * confidence, 2), "language": code})
    return found_codes, found


async def translate(
    registry: Registry,
    texts: Sequence[str],
    source: str,
    target: str,
    fmt: str,
    alternatives: int,
    max_beam_size: int,
    detect_languages: Sequence[str],
    ctx: RequestContext,
) -> tuple[list[Translated], LoadedModel]:
    """Translations of ``texts`` (with up to ``alternatives`` other hypotheses each, plain text only) and their
    warnings, and the model of the first text (the metrics label). The language policy applies as on /v1: with
    MT_LANGUAGE_MISMATCH=reject a text that is not in the named ``source`` raises LanguageMismatch (not for "auto",
    whose languages are detected)."""
    detected: list[dict[str, Any] | None] = [None] * len(texts)
    if source == "auto":
        codes, found = await _detect_sources(registry, texts, target, fmt, detect_languages)
        models = [route(registry, [t], None, c, target)[0][0] for t, c in zip(texts, codes, strict=True)]
        detected = list(found)
        served = sorted({s for s, _ in registry.pairs()})
        for i, text in enumerate(texts):  # a language no model serves by its own code, as the warning names it
            other = unserved_language(_TAG.sub(" ", text) if fmt == "html" else text, ctx.quality, served)
            if other is not None:
                detected[i] = {"confidence": round(100 * other[1], 2), "language": other[0]}
    else:
        models, _ = route(registry, texts, None, source, target)
        if ctx.quality is not None:
            check_languages(models, texts, ctx.quality)
    n_best = alternatives + 1 if fmt == "text" else 1
    options = TranslateOptions.request(num_hypotheses=n_best, max_beam_size=max_beam_size)
    groups: dict[str, list[int]] = {}
    for i, model in enumerate(models):
        groups.setdefault(model.route_key, []).append(i)
    work = [prepare(models[idx[0]], [texts[j] for j in idx], ctx, True, fmt, idx) for idx in groups.values()]
    runs = await asyncio.gather(*(prepared.run(options, ctx) for prepared in work))
    out: list[Translated | None] = [None] * len(texts)
    first = models[0]
    for (results, used), idx in zip(runs, groups.values(), strict=True):
        if idx[0] == 0:
            first = used
        for i, t in zip(idx, results, strict=True):
            others: list[str] = []
            for text, _, _ in t.hypotheses[1:]:
                if text != t.text and text not in others:
                    others.append(text)
            source = texts[i] if fmt == "text" else plain_text(texts[i], used.languages[0])  # HTML: its text
            warnings = text_assessment(used, source, t, options, ctx.quality, True)[1]
            out[i] = Translated(t.text, others[:alternatives], detected[i], warnings)
    return out, first  # type: ignore[return-value]
