"""What every endpoint does alike: tokenize with the model's limit, submit typed work, wait for it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from engine.decoding import TranslateOptions
from engine.translation import SourceTooLongError
from service.execution.work import Source, WorkOptions
from service.models.registry import LoadedModel, UnknownModel
from service.scheduling.errors import ShuttingDown
from service.serving.context import RequestContext


def tokenize(
    model: LoadedModel, texts: Sequence[str], ctx: RequestContext, field: str = "texts", target: bool = False
) -> list[list[int]]:
    """Subword ids + EOS of each text (``target``: target-language texts, cut by the model's target tokenizer). A
    text over ``model.max_source_subwords`` raises SourceTooLongError with ``field`` (the request field it came
    from) and ``indexed`` (whether the field is a list) set on it."""
    if ctx.logged_texts is not None:
        ctx.logged_texts.extend(texts)
    texts = [text if text.strip() else "" for text in texts]  # whitespace only: the empty sentence, everywhere
    try:
        ids = model.engine.target_ids if target else model.engine.source_ids
        return ids(texts, model.max_source_subwords)
    except SourceTooLongError as exc:
        exc.field, exc.indexed = field, field == "texts"
        raise


async def run_work(
    model: LoadedModel, options: WorkOptions, sources: list[Source], ctx: RequestContext, listener: Any = None
) -> tuple[list[Any], LoadedModel]:
    """Queue the work on the model's scheduler and wait for its results, in order; (results, the model version
    that produced them). Work that meets a scheduler retired by a version swap goes to the version that replaced
    it. A client that disconnects while waiting cancels the work (the scheduler drops its unstarted sentences, and
    with continuous batching frees the rows of those decoding). ``listener`` (service/scheduling/tickets.py
    Listener) hears each sentence's streamed tokens and result as they come; its ``model`` is set to the version
    that runs them."""
    while True:
        if listener is not None:
            listener.model = model
        try:
            return await _wait(model, options, sources, ctx, listener), model
        except ShuttingDown:
            if model.unloaded and model.replaced_by is None:
                message = f"model {model.name!r} was unloaded before this request's work could start"
                raise UnknownModel(message) from None
            if model.replaced_by is None:
                raise
            model = model.replaced_by


async def _wait(
    model: LoadedModel, options: WorkOptions, sources: list[Source], ctx: RequestContext, listener: Any = None
) -> list[Any]:
    lengths = [s.length for s in sources]
    if isinstance(options, TranslateOptions):  # what the request left to the model, as this version has it
        options = model.engine.resolved(options)
    submit = model.scheduler.submit(
        options,
        sources,
        lengths,
        ctx.timeout_s,
        ctx.request_id,
        ctx.batch_ids,
        listener=listener,
        client=ctx.client,
        timing=ctx.timing,
        priority=ctx.priority,
    )
    task = asyncio.ensure_future(submit)
    # the client's going away is awaited beside the work, not polled: 64 waiting requests polling every 50 ms
    # cost the event loop more than their HTTP (issue 33, docs/engine-speed-log.md)
    gone = asyncio.ensure_future(ctx.disconnected()) if ctx.disconnected is not None else None
    try:
        if gone is not None:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                gone.result()  # (what the watch raised, if anything)
                raise asyncio.CancelledError
        return await task
    finally:
        if gone is not None:
            gone.cancel()
        if not task.done():  # the client went away, or whoever awaits this was cancelled: so is the work
            task.cancel()
