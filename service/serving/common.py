"""What every endpoint does alike: tokenize with the model's limit, submit typed work, wait for it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from service.engine.engine import SourceTooLongError
from service.registry import LoadedModel
from service.serving.context import RequestContext
from service.work import Source, WorkOptions

DISCONNECT_POLL_S = 0.05


def tokenize(model: LoadedModel, texts: Sequence[str], ctx: RequestContext, field: str = "texts") -> list[list[int]]:
    """Subword ids + EOS of each text. A text over ``model.max_source_subwords`` raises SourceTooLongError with
    ``field`` (the request field it came from) and ``indexed`` (whether the field is a list) set on it."""
    if ctx.logged_texts is not None:
        ctx.logged_texts.extend(texts)
    try:
        return model.engine.source_ids(texts, model.max_source_subwords)
    except SourceTooLongError as exc:
        exc.field, exc.indexed = field, field == "texts"
        raise


async def run_work(model: LoadedModel, options: WorkOptions, sources: list[Source], ctx: RequestContext) -> list[Any]:
    """Queue the work on the model's scheduler and wait for its results, in order; a client that disconnects
    while waiting cancels it (the scheduler drops its unstarted sentences and counts them)."""
    task = asyncio.ensure_future(
        model.scheduler.submit(
            options, sources, [s.length for s in sources], ctx.timeout_s, ctx.request_id, ctx.batch_ids
        )
    )
    while True:
        done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if done:
            return task.result()
        if await ctx.is_disconnected():
            task.cancel()
            raise asyncio.CancelledError
