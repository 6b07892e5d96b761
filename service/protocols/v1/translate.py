"""POST /v1/translate: texts -> translations with scores, subwords, n-best, alignment and attention on request."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.decoding import TranslateOptions
from engine.engine import alignment
from engine.translation import Translation
from service.models.registry import LoadedModel, Registry
from service.serving.context import RequestContext
from service.serving.directions import PivotRefused, PivotTranslation
from service.serving.html import plain_text
from service.serving.prepared import prepare
from service.serving.quality import check_languages, text_assessment, unserved_language
from service.serving.routing import Detector, route
from service.serving.terms import warnings as term_warnings


def options_of(body: Any) -> TranslateOptions:
    return TranslateOptions.request(
        beam_size=body.beam_size,
        max_length=body.max_length,
        num_hypotheses=body.num_hypotheses,
        length_penalty=body.length_penalty,
        no_repeat_ngram_size=body.no_repeat_ngram_size,
        return_attention=body.return_attention or body.return_alignment,
    )


@dataclass(frozen=True)
class Plan:
    """Who translates what: the model of each text, its detected language, the texts of each model."""

    models: list[LoadedModel]
    detected: list[str | None]
    groups: dict[str, list[int]]  # model (in its direction: route_key) -> the indices of its texts, in order
    options: TranslateOptions
    split: bool
    fmt: str


def plan(registry: Registry, body: Any, ctx: RequestContext, detect: Detector | None = None) -> Plan:
    """Route each text to its model (service/serving/routing.py) and group the texts by model; a text the
    language policy refuses (MT_LANGUAGE_MISMATCH=reject) raises here, before any work."""
    models, detected = route(
        registry,
        body.texts,
        body.model,
        getattr(body, "source_language", None),
        getattr(body, "target_language", None),
        detect,
    )
    detected = named(registry, body.texts, detected, ctx)
    asked = [f for f in ("return_attention", "return_alignment") if getattr(body, f, False)]
    pivoted = next((m for m in models if m.pivot is not None), None)
    if asked and pivoted is not None:  # two legs: no attention links the source to the translation
        raise PivotRefused(asked[0], pivoted)
    if ctx.quality is not None:
        check_languages(models, body.texts, ctx.quality)
    if ctx.terms is not None:
        for model in models:
            ctx.terms.check_pair(model.name, model.languages)
    groups: dict[str, list[int]] = {}
    for i, model in enumerate(models):
        groups.setdefault(model.route_key, []).append(i)
    split, fmt = getattr(body, "split_sentences", True), getattr(body, "format", "text")
    return Plan(models, detected, groups, options_of(body), split, fmt)


def named(
    registry: Registry, texts: Sequence[str], detected: list[str | None], ctx: RequestContext
) -> list[str | None]:
    """The detected language of each detected text as the language check names it: a language no model serves
    (French to de-en and zh-en) by its own code, not the served language routing chose (its model still translates
    it, with the language_mismatch warning, which names the same language)."""
    served = sorted({s for s, _ in registry.pairs()})
    out = list(detected)
    for i, code in enumerate(detected):
        other = unserved_language(texts[i], ctx.quality, served) if code is not None else None
        if other is not None:
            out[i] = other[0]
    return out


async def translate(
    registry: Registry, body: Any, ctx: RequestContext, detect: Detector | None = None
) -> dict[str, Any]:
    """Each model's texts run as one request on its scheduler, the models side by side; answers come back in
    the order of the texts."""
    p = plan(registry, body, ctx, detect)
    models, detected, groups, options, split, fmt = p.models, p.detected, p.groups, p.options, p.split, p.fmt
    work = [prepare(models[i[0]], [body.texts[j] for j in i], ctx, split, fmt, i) for i in groups.values()]
    runs = await asyncio.gather(*(prepared.run(options, ctx) for prepared in work))
    translations: list[dict[str, Any]] = [{} for _ in body.texts]
    served: list[LoadedModel] = [models[0]] * len(body.texts)
    for (results, used), idx in zip(runs, groups.values(), strict=True):
        for i, t in zip(idx, results, strict=True):
            served[i] = used
            translations[i] = text_out(used, t, body, i, detected[i], options, ctx)
    first = served[0]
    return {"model": first.name, "version": first.version, "translations": translations}


def text_out(
    used: LoadedModel,
    t: Translation,
    body: Any,
    i: int,
    detected: str | None,
    options: TranslateOptions,
    ctx: RequestContext,
) -> dict[str, Any]:
    """The answer object of text ``i`` (also the final event of a streamed text, service/protocols/v1/stream.py)."""
    out = translation_out(used, t, body, detected)
    split, fmt = getattr(body, "split_sentences", True), getattr(body, "format", "text")
    # HTML is judged by its text (the markup left out) and was split into sentences
    source = body.texts[i] if fmt == "text" else plain_text(body.texts[i], used.languages[0])
    value, warnings = text_assessment(used, source, t, options, ctx.quality, split if fmt == "text" else True)
    out.update(confidence=value, warnings=warnings + term_warnings(t))
    return out


def translation_out(model: LoadedModel, t: Translation, body: Any, detected: str | None = None) -> dict[str, Any]:
    pieces = model.engine.pieces
    out: dict[str, Any] = {
        "text": t.text,
        "score": t.score,
        "source_tokens": pieces(t.source_ids),
        "target_tokens": pieces(t.token_ids),
        "model": model.name,
        "version": model.version,
    }
    if detected is not None:
        out["detected_language"] = detected
    if isinstance(t, PivotTranslation):  # a direction served by pivot (service/serving/directions.py)
        out.update(pivot=model.pivot, pivot_text=t.pivot_text)
    if body.num_hypotheses > 1:
        out["hypotheses"] = [{"text": text, "score": score} for text, score, _ in t.hypotheses]
    if t.attention is not None:
        if body.return_alignment:
            out["alignment"] = alignment(t.attention)
        if body.return_attention:
            out["attention"] = t.attention.tolist()
    elif body.return_alignment:
        out["alignment"] = []
    return out
