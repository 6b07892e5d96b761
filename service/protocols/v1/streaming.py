"""POST /v1/translate with ``"stream": true``: the serving layer's events (service/protocols/v1/stream.py) as
Server-Sent Events (sse-starlette). What fails before the first event keeps its HTTP status (422, 429, 503, ...);
what fails after it is an ``error`` event carrying the status code the non-streaming answer would have had."""

from __future__ import annotations

import json
import logging
from typing import Any

from sse_starlette.sse import EventSourceResponse

from service.api.errors import scheduler_status
from service.models.registry import Registry
from service.protocols.v1 import stream as stream_serving
from service.protocols.v1.schemas import TranslationOut
from service.scheduling.errors import SchedulerError
from service.serving.context import RequestContext
from service.serving.routing import Detector

log = logging.getLogger(__name__)

PING_S = 15  # a comment line this often keeps proxies from closing a quiet stream


def _as_answered(translation: dict[str, Any]) -> dict[str, Any]:
    """The object through the response model, None fields left out, as /v1/translate answers it."""
    return TranslationOut.model_validate(translation).model_dump(mode="json", exclude_none=True)


def _event(event: str, data: dict[str, Any]) -> dict[str, str]:
    return {"event": event, "data": json.dumps(data, ensure_ascii=False, allow_nan=False)}


async def translate_events(
    registry: Registry, body: Any, ctx: RequestContext, detect: Detector | None
) -> EventSourceResponse:
    events = await stream_serving.translate_stream(registry, body, ctx, detect)

    async def source():
        try:
            async for event, data in events:
                if event == "translation":  # exactly what the non-streaming answer has at translations[i]
                    data = {**data, "translation": _as_answered(data["translation"])}
                yield _event(event, data)
        except SchedulerError as exc:
            error = {"code": scheduler_status(exc), "detail": str(exc)}
            if getattr(exc, "retry_after", None):
                error["retry_after"] = exc.retry_after  # type: ignore[attr-defined]
            yield _event("error", error)
        except Exception:
            log.exception("streamed translation failed", extra={"request_id": ctx.request_id})
            yield _event("error", {"code": 500, "detail": f"internal error; quote request id {ctx.request_id}"})
        finally:
            await events.aclose()

    return EventSourceResponse(source(), ping=PING_S)
