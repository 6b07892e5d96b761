"""LibreTranslate-compatible API at the root: POST /translate, POST /detect, GET /languages, GET /health.

Fields come as JSON, forms (application/x-www-form-urlencoded, multipart/form-data) or the query string, as
LibreTranslate takes them (a repeated ``q`` is a batch); answers and errors have LibreTranslate's shapes and
status codes: 400 {"error"} for a bad request or an unserved language, 403 for an invalid API key, 429
{"error": "Slowdown: ..."} when the queue (or the API key's share of it) is full or the key is over its rate
limit (and, as /v1 does, 413 for a body over the limit, 503 while loading or draining, 504 past the deadline).

Honoured fields (docs/protocols.md): ``q`` (a string, or a list of strings: a JSON list or a repeated field),
``source`` (a code or "auto"), ``target``, ``format`` ("text" | "html"), ``alternatives`` (plain text),
``api_key`` (with MT_API_KEYS; also accepted as 'Authorization: Bearer' or X-API-Key). Other fields are
ignored, as LibreTranslate ignores them. Ours beside LibreTranslate's: an answer carries /v1's
``warnings`` (a list per text) and, when there are any, the X-MT-Warnings header (``<text index>:<code>``, comma-
separated); with MT_LANGUAGE_MISMATCH=reject a text not in the named ``source`` is a 400.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from pydantic import BaseModel, Field

from service.access.keys import match_key
from service.api.limits import too_long_hint
from service.api.requests import registry_of
from service.protocols.libretranslate import mapping as serving
from service.protocols.protocol_route import ProtocolError, ProtocolRoute, check_unicode, context_of, error_schema
from service.protocols.v1.documents import result_response, upload_of
from service.serving.quality import WARNINGS_HEADER, warnings_header

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


class Detection(BaseModel):
    confidence: float = Field(ge=0, le=100)
    language: str


class TextWarning(BaseModel):
    code: str
    message: str


class LibreTranslateResponse(BaseModel):
    translatedText: str | list[str]  # noqa: N815 (LibreTranslate's field names)
    detectedLanguage: Detection | list[Detection] | None = None  # noqa: N815
    alternatives: list[str] | list[list[str]] | None = None
    warnings: list[TextWarning] | list[list[TextWarning]] | None = Field(
        None, description="ours, not LibreTranslate's: /v1's warnings of each text (of its text, for format html)"
    )


ERRORS = {
    400: error_schema("invalid request, or a language not served"),
    403: error_schema("invalid API key"),
    413: error_schema("request body too large, or more sentences than the server queues"),
    429: error_schema("Slowdown: the queue is full; see Retry-After"),
    500: error_schema("internal error"),
    503: error_schema("not ready, or shutting down; see Retry-After"),
    504: error_schema("the deadline passed before the work could start"),
}


class LibreRoute(ProtocolRoute):
    prefixes = {429: "Slowdown: "}


async def _fields(request: Request) -> tuple[dict[str, Any], bool]:
    """(the request's fields, whether they came as JSON), read as LibreTranslate reads them: a JSON body alone,
    else the query string and the form together (Flask's ``request.values``; the query string's first). Form and
    query values are strings, line endings made LF; a repeated ``q`` is a batch (a list, as in JSON), any other
    field given twice is refused."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    items = list(request.query_params.multi_items())
    if content_type in FORM_TYPES:
        form = await request.form(max_files=0, max_fields=64)
        for key, value in form.multi_items():
            if not isinstance(value, str):
                raise ProtocolError(400, f"Invalid request: {key} must be text, not a file")
            items.append((key, value))
    else:
        body = await request.body()
        if body.strip():
            try:
                payload = json.loads(body, parse_constant=_no_constant)
            except (ValueError, RecursionError):
                raise ProtocolError(400, "Invalid JSON format") from None
            if not isinstance(payload, dict):
                raise ProtocolError(400, "Invalid JSON format")
            return payload, True
        if not items:
            return {}, True
    fields: dict[str, Any] = {}
    for key, value in items:
        value = value.replace("\r\n", "\n")
        if key == "q" and key in fields:
            fields[key] = [*fields[key], value] if isinstance(fields[key], list) else [fields[key], value]
        elif key in fields:
            raise ProtocolError(400, f"Invalid request: {key} given more than once (only q may repeat: a batch)")
        else:
            fields[key] = value
    return fields, False


def _no_constant(name: str) -> None:
    raise ValueError(name)


def _string(fields: dict[str, Any], name: str, required: bool = True) -> str | None:
    value = fields.get(name)
    if name in fields and value is None:  # JSON null: every field of this API is a string when it is given
        raise ProtocolError(400, f"Invalid request: {name} must be a string")
    if value is None or value == "":
        if required:
            raise ProtocolError(400, f"Invalid request: missing {name} parameter")
        return None
    if not isinstance(value, str):
        raise ProtocolError(400, f"Invalid request: {name} must be a string")
    return check_unicode(value, name)


def _check_key(request: Request, fields: dict[str, Any]) -> str:
    """With MT_API_KEYS: api_key in the body (or the /v1 headers); 403 for a wrong one, 400 for none. Returns the
    key's label (service/access/keys.py), also set in the request scope for its limits and logs; "" without keys."""
    offered = fields.get("api_key")
    if "api_key" in fields and not isinstance(offered, str):  # null too: the schema says string
        raise ProtocolError(400, "Invalid request: api_key must be a string")
    if isinstance(offered, str):
        check_unicode(offered, "api_key")
    keys = request.app.state.mt.settings.access.api_keys
    if not keys:
        return ""
    if offered is None or offered == "":
        auth = request.headers.get("authorization", "")
        offered = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key")
    if not offered:
        raise ProtocolError(400, "Please contact the server operator to get an API key")
    label = match_key(offered, keys)
    if label is None:
        raise ProtocolError(403, "Invalid API key")
    request.scope["state"]["api_key"] = label
    return label


async def _check_rate(request: Request, label: str) -> None:
    """A key over its rate limit (MT_KEY_RATE_PER_S) gets 429 with Retry-After, as on /v1 and /v2."""
    state = request.app.state.mt
    limited = await state.key_rates.check(label) if label else None
    if limited is not None:
        state.metrics.key_rejections.labels(label, "rate_limit").inc()
        raise ProtocolError(429, str(limited), {"Retry-After": str(limited.retry_after)})


def _json_body(schema: dict, example: dict) -> dict:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema, "example": example}},
            "description": "JSON, or the same fields as a form (application/x-www-form-urlencoded or "
            "multipart/form-data; q a single string there)",
        }
    }


FILE_UPLOAD = {
    "type": "object",
    "required": ["file", "target"],
    "properties": {
        "file": {"type": "string", "format": "binary", "description": "the document; its name's extension is its type"},
        "source": {"type": "string", "description": "ISO 639-1 or 'auto'"},
        "target": {"type": "string"},
        "api_key": {"type": "string"},
    },
}


def _schemas(limits, max_alternatives: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON schemas of /translate and /detect, with this server's limits."""
    text = {"type": "string", "maxLength": limits.max_chars_per_text}
    translate_schema = {
        "type": "object",
        "required": ["q", "source", "target"],
        "properties": {
            "q": {
                "anyOf": [
                    {**text, "minLength": 1},
                    {"type": "array", "items": text, "minItems": 1, "maxItems": limits.max_texts_translate},
                ],
                "description": "text, or texts, to translate",
            },
            "source": {"type": "string", "pattern": "^([a-z]{2}|auto)$", "description": "ISO 639-1 code or auto"},
            "target": {"type": "string", "pattern": "^[a-z]{2}$"},
            "format": {"type": "string", "enum": ["text", "html", ""], "default": "text", "description": "'' is text"},
            "alternatives": {"type": "integer", "minimum": 0, "maximum": max_alternatives, "default": 0},
            "api_key": {"type": "string"},
        },
    }
    detect_schema = {
        "type": "object",
        "required": ["q"],
        "properties": {"q": {**text, "minLength": 1}, "api_key": {"type": "string"}},
    }
    return translate_schema, detect_schema


def _texts(fields: dict[str, Any], limits) -> tuple[list[str], bool]:
    """The texts of a /translate request's q (a text or a list of texts) within the limits, and whether q is a list."""
    q = fields.get("q")
    if q is None or q == "" or q == []:
        raise ProtocolError(400, "Invalid request: missing q parameter")
    batch = isinstance(q, list)
    texts = q if batch else [q]
    if not all(isinstance(t, str) for t in texts):
        raise ProtocolError(400, "Invalid request: q must be a string or a list of strings")
    texts = [check_unicode(t, "q") for t in texts]
    if len(texts) > limits.max_texts_translate:
        limit = limits.max_texts_translate
        message = f"Invalid request: request ({len(texts)}) exceeds text limit ({limit})"
        raise ProtocolError(400, f"{message}; at most {limit} texts per request (MT_MAX_TEXTS_TRANSLATE)")
    for t in texts:
        if len(t) > limits.max_chars_per_text:
            raise ProtocolError(400, _too_long(len(t), limits.max_chars_per_text))
    return texts, batch


def _answer(results: list, batch: bool, detected: bool, alternatives: int, response: Response) -> dict[str, Any]:
    """LibreTranslate's answer: one text's fields, or lists of them for a list q; the warnings header too."""
    answer: dict[str, Any] = {"translatedText": [r.text for r in results] if batch else results[0].text}
    if detected:
        answer["detectedLanguage"] = [r.detected for r in results] if batch else results[0].detected
    if alternatives > 0:
        answer["alternatives"] = [r.alternatives for r in results] if batch else results[0].alternatives
    found = [r.warnings or [] for r in results]
    answer["warnings"] = found if batch else found[0]
    header = warnings_header(found)
    if header is not None:
        response.headers[WARNINGS_HEADER] = header
    return answer


async def _translate_file(request: Request, timeout_s: float) -> dict[str, str]:
    """/translate_file: the upload translated as a document job, waited for up to ``timeout_s``; its download URL."""
    registry_of(request)
    data, filename, fields = await upload_of(request)
    label = _check_key(request, fields)
    await _check_rate(request, label)
    source, target = _string(fields, "source"), _string(fields, "target")
    state = request.app.state.mt
    jobs = state.documents
    source = None if source == "auto" else source
    record = await jobs.submit(data, filename, source, target, None, label, state.detector)
    request.scope["state"]["model"] = record["model"]
    record = await jobs.wait(record["id"], timeout_s)
    if record["status"] == "failed":
        raise ProtocolError(500, f"the file could not be translated: {record['error']}")
    if record["status"] != "done":
        where = f"/v1/documents/{record['id']}"
        raise ProtocolError(504, f"the file is still being translated; its status and result are at {where}")
    name = f"{record['id']}.{record['filename']}"
    return {"translatedFileUrl": str(request.url_for("download_file", filename=name))}


def build_libretranslate_router(app: FastAPI) -> APIRouter:
    s = app.state.mt.settings
    max_alternatives = s.limits.max_beam_size - 1
    translate_schema, detect_schema = _schemas(s.limits, max_alternatives)
    router = APIRouter(route_class=LibreRoute, tags=["LibreTranslate"])

    @router.get("/health", summary="Liveness, as LibreTranslate answers it")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/languages", response_model=list[Language], responses=ERRORS, summary="Languages served")
    async def languages(request: Request) -> list[dict[str, Any]]:
        return serving.languages(registry_of(request))

    @router.post(
        "/detect",
        response_model=list[Detection],
        responses=ERRORS,
        summary="Detect the language of a text",
        openapi_extra=_json_body(detect_schema, {"q": "Ein Hund läuft."}),
    )
    async def detect(request: Request) -> list[dict[str, Any]]:
        fields, _ = await _fields(request)
        _check_key(request, fields)
        q = _string(fields, "q")
        limit = s.limits.max_chars_per_text
        if len(q) > limit:
            raise ProtocolError(400, _too_long(len(q), limit))
        return await serving.detect(q, s.languages.detect_languages)

    @router.post(
        "/translate",
        response_model=LibreTranslateResponse,
        response_model_exclude_none=True,
        responses=ERRORS,
        summary="Translate text or HTML",
        openapi_extra=_json_body(translate_schema, {"q": "Ein Hund läuft.", "source": "de", "target": "en"}),
    )
    async def translate(request: Request, response: Response) -> dict[str, Any]:
        fields, is_json = await _fields(request)
        await _check_rate(request, _check_key(request, fields))
        texts, batch = _texts(fields, s.limits)
        source, target = _string(fields, "source"), _string(fields, "target")
        fmt = _string(fields, "format", required=False) or "text"
        if fmt not in ("text", "html"):
            raise ProtocolError(400, f"{fmt} format is not supported")
        alternatives = _alternatives(fields.get("alternatives", 0), is_json, max_alternatives)
        registry = registry_of(request)
        results, first = await serving.translate(
            registry, texts, source, target, fmt, alternatives, s.limits.max_beam_size,
            s.languages.detect_languages, context_of(request),
        )  # fmt: skip
        request.scope["state"]["model"] = first.name
        return _answer(results, batch, source == "auto", alternatives, response)

    @router.post(
        "/translate_file",
        responses={**ERRORS, 415: error_schema("a file type that is not translated (docs/documents.md)")},
        summary="Translate a file (multipart: file, source, target); answers the translated file's URL",
        openapi_extra={"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": FILE_UPLOAD}}}},
    )
    async def translate_file(request: Request) -> dict[str, str]:
        return await _translate_file(request, s.limits.max_request_timeout_s)

    @router.get(
        "/download_file/{filename}",
        responses={**ERRORS, 404: error_schema("no such file: never translated here, or deleted after retention")},
        summary="A file /translate_file translated",
    )
    async def download_file(filename: str, request: Request) -> Response:
        record, path = await request.app.state.mt.documents.result(filename.split(".", 1)[0])
        if record["status"] != "done":
            raise ProtocolError(404, f"{filename} is not translated (yet)")
        return result_response(record, path)

    return router


def _too_long(length: int, limit: int) -> str:
    """LibreTranslate's message for a text over the limit, and ours after it."""
    hint = too_long_hint(limit, "POST /translate_file")
    return f"Invalid request: request ({length}) exceeds text limit ({limit}); {hint}"


def _alternatives(value: Any, is_json: bool, limit: int) -> int:
    if isinstance(value, str) and not is_json:
        if not value.strip().isdigit():
            raise ProtocolError(400, "Invalid request: alternatives parameter is not a number")
        value = int(value)
    if isinstance(value, float) and value.is_integer():  # JSON Schema counts 2.0 as an integer
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(400, "Invalid request: alternatives parameter is not a number")
    if value > limit:
        raise ProtocolError(400, f"Invalid request: alternatives parameter must be <= {limit}")
    return value
