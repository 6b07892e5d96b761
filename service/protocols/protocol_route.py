"""What the v2 and LibreTranslate routers share: errors as {"error": ...}, the request context, model lookup.

``ProtocolRoute`` is the APIRoute class of both routers: whatever a handler raises (validation, the serving
layer's and the scheduler's exceptions) comes back in the protocol's form, {"error": message}, with the
status ``status_of`` maps it to; the /v1 API's handlers in service/api/errors.py are not involved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from engine.translation import SourceTooLongError
from service.api.errors import NotReady, scheduler_status
from service.api.middleware.body import BodyTooLarge, body_limit, too_large
from service.api.requests import InvalidDeadline, deadline_s, request_context
from service.documents import DocumentError
from service.models.registry import UnknownModel
from service.scheduling.errors import BatchFailed, EngineRestarted, QueueFull, SchedulerError
from service.serving.context import RequestContext
from service.serving.document_jobs import JobNotFound
from service.serving.quality import LanguageMismatch
from service.serving.routing import UnservedPair

log = logging.getLogger(__name__)


class ProtocolError(Exception):
    """An error a handler reports as it is: {"error": message} with ``status``."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.headers = status, headers or {}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    safe = message.encode("utf-8", "replace").decode("utf-8")  # a message may quote input with lone surrogates
    return JSONResponse({"error": safe}, status_code=status, headers=headers)


def check_unicode(text: str, what: str) -> str:
    """``text`` if it can be encoded as UTF-8 (JSON lets a client send lone surrogates: "\\ud800"); else 400."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(400, f"{what} is not valid Unicode (it has a lone surrogate)") from None
    return text


def validation_message(exc: RequestValidationError | ValidationError) -> str:
    """One line naming each invalid field: "inputs.0.shape: Input should be a valid list; ..."."""
    parts = []
    for error in exc.errors():
        loc = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        parts.append(f"{loc}: {error.get('msg', 'invalid')}" if loc else str(error.get("msg", "invalid")))
    return "; ".join(parts)[:2000] or "invalid request"


def status_of(exc: Exception, request: Request) -> tuple[int, str, dict[str, str]]:
    """(status, message, headers) of an exception raised while serving a protocol request."""
    if isinstance(exc, ProtocolError):
        return exc.status, str(exc), exc.headers
    if isinstance(exc, RequestValidationError | ValidationError):
        return 400, validation_message(exc), {}
    if isinstance(exc, BodyTooLarge):
        return 413, too_large(body_limit(request.app.state.mt.settings, request.url.path)), {}
    if isinstance(exc, DocumentError):
        return exc.status, str(exc), {}
    if isinstance(exc, JobNotFound):
        return 404, str(exc), {}
    if isinstance(exc, HTTPException):  # raised by Starlette itself, e.g. a malformed multipart form: 400
        return exc.status_code, str(exc.detail), dict(exc.headers or {})
    if isinstance(exc, SourceTooLongError):
        return 400, f"text {exc.index}: {exc}", {}
    if isinstance(exc, UnknownModel):
        return 404, str(exc), {}
    if isinstance(exc, UnservedPair):
        return 400, str(exc), {}
    if isinstance(exc, LanguageMismatch):  # MT_LANGUAGE_MISMATCH=reject
        return 400, f"text {exc.index}: {exc}", {}
    if isinstance(exc, NotReady):
        return 503, str(exc), {"Retry-After": "2"}
    if isinstance(exc, SchedulerError):
        status = scheduler_status(exc)
        if isinstance(exc, BatchFailed):
            rid = request.scope["state"].get("request_id", "")
            return 500, f"internal error; quote request id {rid} when reporting it", {}
        if isinstance(exc, QueueFull | EngineRestarted):
            return status, str(exc), {"Retry-After": str(exc.retry_after)}
        return status, str(exc), {"Retry-After": "5"} if status == 503 else {}
    rid = request.scope["state"].get("request_id", "")
    log.error("unhandled error", exc_info=exc, extra={"request_id": rid})
    return 500, f"internal error; quote request id {rid} when reporting it", {}


class ProtocolRoute(APIRoute):
    """Routes whose every error is {"error": message}; ``message_prefix`` adapts a status's wording
    (LibreTranslate says "Slowdown: ..." on 429)."""

    prefixes: dict[int, str] = {}

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()
        prefixes = self.prefixes

        async def protocol_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:  # every error in the protocol's form
                status, message, headers = status_of(exc, request)
                return error_response(status, prefixes.get(status, "") + message, headers)

        return protocol_handler


def context_of(request: Request, timeout_s: float | None = None, timing: Any = None) -> RequestContext:
    """The serving layer's context, with /v1's language policy (warnings, MT_LANGUAGE_MISMATCH); ``timeout_s`` is the
    protocol's own deadline parameter, when it has one; ``timing`` (service/observability/inference_stats.py
    RequestTiming) gets
    where the time went. A bad X-Request-Timeout is a 400."""
    try:
        ctx = request_context(request, deadline_s(request, timeout_s), request.app.state.mt.quality)
    except InvalidDeadline as exc:
        raise ProtocolError(400, str(exc)) from None
    ctx.timing = timing
    return ctx


def error_schema(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/json": {
                "schema": {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
            }
        },
    }
