"""Errors a client can cause or meet, as JSON {"detail": "..."} with the status the API promises."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from engine.translation import SourceTooLongError
from service.api.limits import too_long_hint
from service.api.middleware.body import BodyTooLarge, body_limit, too_large
from service.api.middleware.paths import error_body
from service.models.registry import UnknownModel
from service.protocols.v1.attention import OutOfRange
from service.scheduling.errors import (
    BatchFailed,
    DeadlineExceeded,
    EngineRestarted,
    QueueFull,
    RequestTooLarge,
    SchedulerError,
    ShuttingDown,
)
from service.serving.quality import LanguageMismatch
from service.serving.routing import UnservedPair
from service.serving.terms import TermsError
from service.state import StateUnavailable

log = logging.getLogger(__name__)


class NotReady(Exception):
    pass


def _detail(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"example": {"detail": description}}}}


ERROR_RESPONSES = {
    401: _detail("missing or invalid API key (when keys are configured)"),
    404: _detail("unknown model"),
    413: _detail("request body too large, or more texts than the server queues (MT_MAX_QUEUE_SENTENCES)"),
    429: _detail("queue full; see Retry-After"),
    500: _detail("internal error (no details are sent; the log has them under the request id)"),
    503: _detail("not ready, or shutting down; see Retry-After"),
    504: _detail("the deadline passed before the work could start"),
}


# what each scheduler refusal means over HTTP (the scheduler knows nothing of HTTP)
SCHEDULER_STATUS: dict[type[SchedulerError], int] = {
    QueueFull: 429,
    RequestTooLarge: 413,
    ShuttingDown: 503,
    DeadlineExceeded: 504,
    BatchFailed: 500,
    EngineRestarted: 503,
}


def scheduler_status(exc: SchedulerError) -> int:
    return next((status for cls, status in SCHEDULER_STATUS.items() if isinstance(exc, cls)), 500)


ECHO_LIMIT = 100  # characters of a client's input an error body repeats, at most


def _echo(value: Any) -> Any:
    """A client's input as an error may repeat it: JSON-safe, and at most ECHO_LIMIT characters of it."""
    value = _json_safe(value)
    if isinstance(value, str) and len(value) > ECHO_LIMIT:
        return value[:ECHO_LIMIT] + f"... ({len(value)} characters)"
    if isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False)
        if len(text) > ECHO_LIMIT:
            return text[:ECHO_LIMIT] + f"... ({len(text)} characters)"
    return value


def _json_safe(value: Any) -> Any:
    """What a validation error echoes back must itself be JSON: lone surrogates and NaN / Infinity are not."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {_json_safe(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


# /v1's Text fields (service/protocols/v1/schemas.py): MT_MAX_CHARS_PER_TEXT
TEXT_FIELDS = ("texts", "source", "target")
TEXTS_SETTINGS = {"/v1/translate": "MT_MAX_TEXTS_TRANSLATE", "/v1/embed": "MT_MAX_TEXTS_EMBED"}


def _a_text_too_long(error: dict) -> bool:
    loc = list(error.get("loc", []))
    return error.get("type") == "string_too_long" and loc[:1] == ["body"] and loc[1:2] and loc[1] in TEXT_FIELDS


def _unprocessable(loc: list, message: str) -> JSONResponse:
    return JSONResponse({"detail": [{"type": "value_error", "loc": loc, "msg": message, "input": None}]}, 422)


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = []
    json_body = "json" in request.headers.get("content-type", "")
    for error in jsonable_encoder(exc.errors()):
        whole_body = list(error.get("loc", [])) == ["body"] and error.get("type") == "model_attributes_type"
        if whole_body and not json_body:
            error["msg"] = "the body must be a JSON object sent with 'Content-Type: application/json'"
        if _a_text_too_long(error):
            limit = error.get("ctx", {}).get("max_length")
            error["msg"] = f"{error['msg']}; {too_long_hint(limit, 'POST /v1/documents')}"
        elif error.get("type") == "too_long" and list(error.get("loc", [])) == ["body", "texts"]:
            setting = TEXTS_SETTINGS.get(request.url.path)
            if setting:
                error["msg"] = f"{error['msg']}: the texts per request ({setting}); send the rest in more requests"
        if "input" in error:
            error["input"] = _echo(error["input"])
        errors.append(_json_safe(error))
    return JSONResponse({"detail": errors}, status_code=422)


async def _unknown_model(_: Request, exc: UnknownModel) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


async def _not_ready(_: Request, exc: NotReady) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "2"})


async def _body_too_large(request: Request, _: BodyTooLarge) -> JSONResponse:
    limit = body_limit(request.app.state.mt.settings, request.url.path)
    return JSONResponse({"detail": too_large(limit)}, status_code=413)


async def _http_error(request: Request, exc: HTTPException):
    # FastAPI answers 400 when a body cannot be decoded at all (not UTF-8, ...): report it like a JSON error.
    if exc.status_code == 400 and exc.__cause__ is not None:
        cause = type(exc.__cause__).__name__
        message = f"request body could not be parsed ({cause}); send UTF-8 encoded JSON"
        return JSONResponse(
            {"detail": [{"type": "json_invalid", "loc": ["body"], "msg": message, "input": None}]}, status_code=422
        )
    path = request.url.path
    if path == "/v2" or path.startswith("/v2/"):  # unrouted under /v2: the inference protocol's or DeepL's form
        message = f"{exc.detail}: {request.method} {path}"
        return JSONResponse(error_body(path, message, exc.status_code), exc.status_code, headers=exc.headers)
    return await http_exception_handler(request, exc)


async def _state_unavailable(_: Request, exc: StateUnavailable) -> JSONResponse:
    log.warning("state store unavailable: %s", exc)
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": str(exc.retry_after)})


async def _too_long(_: Request, exc: SourceTooLongError) -> JSONResponse:
    field = getattr(exc, "field", "texts")  # set by the serving layer: the request field the text came from
    loc = ["body", field, exc.index] if getattr(exc, "indexed", True) else ["body", field]
    return _unprocessable(loc, str(exc))


async def _language_mismatch(_: Request, exc: LanguageMismatch) -> JSONResponse:
    return _unprocessable(["body", "texts", exc.index], str(exc))


async def _unserved_pair(_: Request, exc: UnservedPair) -> JSONResponse:
    return _unprocessable(["body", exc.field], str(exc))


async def _unusable_terms(_: Request, exc: TermsError) -> JSONResponse:
    return _unprocessable(["body", exc.field], str(exc))


async def _out_of_range(_: Request, exc: OutOfRange) -> JSONResponse:
    return _unprocessable(["body", exc.field], str(exc))


async def _scheduler_error(request: Request, exc: SchedulerError) -> JSONResponse:
    status = scheduler_status(exc)
    headers = {}
    if isinstance(exc, QueueFull | EngineRestarted):
        headers["Retry-After"] = str(exc.retry_after)
    elif status == 503:
        headers["Retry-After"] = "5"
    if isinstance(exc, BatchFailed):
        rid = request.scope["state"].get("request_id", "")
        return JSONResponse({"detail": f"internal error; quote request id {rid} when reporting it"}, status_code=500)
    return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    rid = request.scope["state"].get("request_id", "")
    log.error("unhandled error", exc_info=exc, extra={"request_id": rid})
    return JSONResponse({"detail": f"internal error; quote request id {rid} when reporting it"}, status_code=500)


HANDLERS = [
    (RequestValidationError, _invalid_request),
    (UnknownModel, _unknown_model),
    (NotReady, _not_ready),
    (BodyTooLarge, _body_too_large),
    (HTTPException, _http_error),
    (StateUnavailable, _state_unavailable),
    (SourceTooLongError, _too_long),
    (LanguageMismatch, _language_mismatch),
    (UnservedPair, _unserved_pair),
    (TermsError, _unusable_terms),
    (OutOfRange, _out_of_range),
    (SchedulerError, _scheduler_error),
    (Exception, _internal),
]


def install(app: FastAPI) -> None:
    """Every error a request can meet, mapped here alone to its status and body (the /v2 and LibreTranslate routers'
    own through service/protocols/protocol_route.py)."""
    for exc, handler in HANDLERS:
        app.add_exception_handler(exc, handler)
