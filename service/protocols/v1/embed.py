"""POST /v1/embed: texts -> pooled encoder states."""

from __future__ import annotations

from typing import Any

from service.execution.work import EmbedOptions, Source
from service.models.registry import LoadedModel
from service.serving.common import run_work, tokenize
from service.serving.context import RequestContext


async def embed(model: LoadedModel, body: Any, ctx: RequestContext) -> dict[str, Any]:
    sources = [Source(ids) for ids in tokenize(model, body.texts, ctx)]
    vectors, used = await run_work(model, EmbedOptions(body.pooling, body.normalize), sources, ctx)
    embeddings = [v.tolist() for v in vectors]
    return {"model": used.name, "version": used.version, "dimension": len(vectors[0]), "embeddings": embeddings}
