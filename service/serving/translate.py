"""POST /v1/translate: texts -> translations with scores, subwords, n-best, alignment and attention on request."""

from __future__ import annotations

from typing import Any

from service.engine.engine import TranslateOptions, Translation, alignment
from service.registry import LoadedModel
from service.serving.common import run_work, tokenize
from service.serving.context import RequestContext
from service.work import Source


def options_of(body: Any) -> TranslateOptions:
    return TranslateOptions(
        beam_size=body.beam_size,
        max_length=body.max_length,
        num_hypotheses=body.num_hypotheses,
        length_penalty=body.length_penalty,
        return_attention=body.return_attention or body.return_alignment,
    )


async def translate(model: LoadedModel, body: Any, ctx: RequestContext) -> dict[str, Any]:
    sources = [Source(ids) for ids in tokenize(model, body.texts, ctx)]
    results = await run_work(model, options_of(body), sources, ctx)
    return {"model": model.name, "translations": [translation_out(model, t, body) for t in results]}


def translation_out(model: LoadedModel, t: Translation, body: Any) -> dict[str, Any]:
    pieces = model.engine.pieces
    out: dict[str, Any] = {
        "text": t.text,
        "score": t.score,
        "source_tokens": pieces(t.source_ids),
        "target_tokens": pieces(t.token_ids),
    }
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
