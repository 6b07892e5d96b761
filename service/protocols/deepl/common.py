"""What every DeepL API route shares (translate, languages, usage; glossaries and documents too): errors as DeepL
sends them, fields read from JSON or form bodies, the caller's key and character quota.

``DeepLRoute`` is the APIRoute class of DeepL routers: whatever a handler raises comes back as {"message": ...}
with DeepL's status: 400 for a bad request (never FastAPI's {"detail": ...}, never a 500 for input), 403 for a
missing or wrong key (the middleware's, service/api/middleware/access.py; a wrong document_key), 404 for an unknown
resource (a glossary or document of another key too), 413 for a
body over MT_MAX_BODY_BYTES, 429 with Retry-After when the queue or the key's share of it is full or the key is
over its rate limit, 456 when the key's character limit would be passed (or it keeps the most glossaries allowed),
503 with Retry-After while loading, draining or when the state store cannot be reached, 504 past the deadline.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from service.access.quota import CharacterLimitExceeded, CharacterQuota
from service.protocols.deepl.mapping import BadValue, unserved
from service.protocols.protocol_route import ProtocolError, status_of
from service.serving.glossaries import GlossaryLimit, GlossaryNotFound
from service.serving.html import MarkupError
from service.serving.quality import LanguageMismatch
from service.serving.routing import UnservedPair
from service.serving.terms import TermsError
from service.state import StateUnavailable

QUOTA_EXCEEDED = 456  # DeepL's status for a character limit reached
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class DeepLError(ProtocolError):
    """An error a DeepL handler reports as it is: {"message": message} with ``status``."""


def message_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    safe = message.encode("utf-8", "replace").decode("utf-8")  # a message may quote input with lone surrogates
    return JSONResponse({"message": safe}, status_code=status, headers=headers)


def deepl_status(exc: Exception, request: Request) -> tuple[int, str, dict[str, str]]:
    """(status, message, headers) of an exception raised while serving a DeepL request."""
    if isinstance(exc, CharacterLimitExceeded):
        return QUOTA_EXCEEDED, str(exc), {}
    if isinstance(exc, StateUnavailable):
        return 503, f"the state store is unavailable: {exc}", {"Retry-After": str(exc.retry_after)}
    if isinstance(exc, BadValue | MarkupError | LanguageMismatch):
        return 400, str(exc), {}
    if isinstance(exc, UnservedPair):
        return 400, unserved(exc), {}
    if isinstance(exc, TermsError):  # a bad glossary (GlossaryInvalid) or one of another language pair
        return 400, f"Value for '{_glossary_field(exc.field)}' not supported. {exc}", {}
    if isinstance(exc, GlossaryNotFound):
        return 404, "Glossary not found.", {}
    if isinstance(exc, GlossaryLimit):
        return QUOTA_EXCEEDED, f"Quota exceeded. {exc}", {}
    status, message, headers = status_of(exc, request)
    if status == 401:
        return 403, message, headers
    if status == 422:
        return 400, message, headers
    return status, message, headers


def _glossary_field(field: str) -> str:
    """DeepL's name of a glossary field named as /v1 names it."""
    return {"source_language": "source_lang", "target_language": "target_lang"}.get(field, field)


class DeepLRoute(APIRoute):
    """Routes whose every error is {"message": ...} with DeepL's status."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def deepl_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:  # every error in DeepL's form
                status, message, headers = deepl_status(exc, request)
                return message_response(status, message, headers)

        return deepl_handler


# --- fields -------------------------------------------------------------------------------------------------
async def read_fields(request: Request) -> tuple[dict[str, list[Any]], bool]:
    """(each field's values, whether the body was JSON). A form (or the query string) gives every value as a string,
    a repeated field several; a JSON body gives each field's JSON value as the one item of its list. The query
    string's fields come first, the body's after them."""
    fields: dict[str, list[Any]] = {}
    for key, value in request.query_params.multi_items():
        fields.setdefault(key, []).append(value)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in FORM_TYPES:
        form = await request.form(max_files=0, max_fields=1000)
        for key, value in form.multi_items():
            if not isinstance(value, str):
                raise DeepLError(400, f"Parameter '{key}' must be text, not a file.")
            fields.setdefault(key, []).append(value)
        return fields, False
    body = await request.body()
    if not body.strip():
        return fields, False
    try:
        payload = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DeepLError(400, "Invalid request: the body is neither valid JSON nor a form.") from None
    if not isinstance(payload, dict):
        raise DeepLError(400, "Invalid request: the JSON body must be an object.")
    for key, value in payload.items():
        fields.setdefault(key, []).append(value)
    return fields, True


def _no_constant(name: str) -> None:
    raise ValueError(name)


def one(fields: dict[str, list[Any]], name: str, required: bool = False) -> Any:
    """The field's value (the last one given), or None when it is not given; 400 when it is required and missing or
    empty, or given as JSON null (no field of the API takes null)."""
    values = fields.get(name) or []
    if values and values[-1] is None:
        raise DeepLError(400, f"Value for '{name}' not supported. It must not be null.")
    value = values[-1] if values else None
    if required and (value is None or value == ""):
        raise DeepLError(400, f"Parameter '{name}' not specified.")
    return value


def string(fields: dict[str, list[Any]], name: str, required: bool = False) -> str | None:
    value = one(fields, name, required)
    if value is not None and not isinstance(value, str):
        raise DeepLError(400, f"Value for '{name}' not supported. It must be a string.")
    if value is not None:
        check_text(value, name)
    return value


def strings(fields: dict[str, list[Any]], name: str) -> list[str]:
    """A list field: repeated form fields, a JSON list of strings, or one string (comma-separated for tag lists)."""
    out: list[str] = []
    for value in fields.get(name) or []:
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, str):
                raise DeepLError(400, f"Value for '{name}' not supported. It must be a string or a list of strings.")
            out.append(check_text(item, name))
    return out


def boolean(fields: dict[str, list[Any]], name: str, default: bool) -> bool:
    """A boolean field: JSON true/false, or "1"/"0" (also "true"/"false") in a form."""
    value = one(fields, name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in ("1", "true", "0", "false"):
        return value in ("1", "true")
    raise DeepLError(400, f"Value for '{name}' not supported. Send true or false (in a form: 1 or 0).")


def check_text(text: str, name: str) -> str:
    """``text`` when it can be encoded as UTF-8 (JSON lets a client send lone surrogates: "\\ud800"); else 400."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DeepLError(
            400, f"Value for '{name}' not supported. It is not valid Unicode (a lone surrogate)."
        ) from None
    return text


# --- the caller ---------------------------------------------------------------------------------------------
def caller(request: Request) -> str:
    """The label of the calling key (set by the middleware), "" without MT_API_KEYS."""
    return request.scope["state"].get("api_key", "")


def quota_of(request: Request) -> CharacterQuota:
    """The character quota (service/access/quota.py) over the state store; StateUnavailable (503) when it cannot be
    used."""
    state = request.app.state.mt
    access = state.settings.access
    limits = {label: int(value) for label, value in access.key_character_limits.items()}
    return CharacterQuota(state.store, access.key_character_limit, limits)


def error_schema(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/json": {
                "schema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}
            }
        },
    }


ERRORS = {
    400: error_schema("bad request: the message names the parameter"),
    403: error_schema("missing or invalid key (DeepL-Auth-Key), when keys are configured"),
    413: error_schema("request body too large, or more sentences than the server queues"),
    429: error_schema("too many requests: the queue, or the key's share or rate; see Retry-After"),
    456: error_schema("the key's character limit would be passed (MT_KEY_CHARACTER_LIMIT)"),
    500: error_schema("internal error (the log has it under the request id)"),
    503: error_schema("not ready, shutting down, or the state store unavailable; see Retry-After"),
    504: error_schema("the deadline passed before the work could start"),
}
