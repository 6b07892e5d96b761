"""DeepL's document API (v2) on the document jobs of /v1/documents (service/serving/document_jobs.py): the same
formats, limits, background work and retention (docs/documents.md), so ``deepl``'s ``translate_document`` works.

- ``POST /v2/document`` (multipart: ``file``, ``target_lang``, optional ``source_lang``, ``glossary_id`` (needs
  source_lang), ``filename``, ``output_format`` (only the upload's own format), ``formality`` as /v2/translate takes
  it): ``{"document_id", "document_key"}``. The document's characters count against the key's character quota
  (456 when they would pass it) when it is accepted, as /v2/translate's texts do.
- ``POST /v2/document/{id}`` (``document_key`` in a JSON or form body): ``status`` (queued, translating, done,
  error), ``seconds_remaining``, ``billed_characters`` once done, ``error_message`` on error.
- ``POST /v2/document/{id}/result`` (``document_key``): the translated file; 503 while it is not done (the client
  waits), 400 with the reason when it failed.

A document_key that is not the document's is 403; an unknown or expired document (or another key's) is 404. Unlike
DeepL, a result may be downloaded again until the job expires (MT_DOCUMENT_RETENTION_S).
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from service.api.requests import registry_of
from service.documents import format_of
from service.protocols.deepl import mapping as serving
from service.protocols.deepl.common import (
    ERRORS,
    DeepLError,
    DeepLRoute,
    caller,
    error_schema,
    quota_of,
    read_fields,
    string,
)
from service.protocols.deepl.glossaries import stored_glossary
from service.protocols.v1.documents import jobs_of, result_response, upload_of
from service.serving.document_jobs import JobNotFound, seconds_remaining

STATUS = {"queued": "queued", "translating": "translating", "done": "done", "failed": "error"}
FORMALITY = ("default", "prefer_more", "prefer_less")  # "more"/"less": no served target has formality (400)
UPLOAD_SCHEMA = {
    "type": "object",
    "required": ["file", "target_lang"],
    "properties": {
        "file": {"type": "string", "format": "binary"},
        "target_lang": {"type": "string", "minLength": 1},
        "source_lang": {"type": "string"},
        "glossary_id": {"type": "string", "description": "a glossary of this key; needs source_lang"},
        "filename": {"type": "string", "description": "the file's name when the upload has none"},
        "output_format": {"type": "string", "description": "only the upload's own format (its extension)"},
        "formality": {"type": "string", "enum": [*FORMALITY, "more", "less"]},
    },
}
KEY_SCHEMA = {
    "type": "object",
    "required": ["document_key"],
    "properties": {"document_key": {"type": "string", "minLength": 1}},
}
KEY_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": KEY_SCHEMA},
            "application/x-www-form-urlencoded": {"schema": KEY_SCHEMA},
        },
    }
}


def deepl_status(record: dict[str, Any]) -> dict[str, Any]:
    """A job's status as DeepL shows it."""
    out: dict[str, Any] = {"document_id": record["id"], "status": STATUS[record["status"]]}
    remaining = seconds_remaining(record)
    if record["status"] in ("queued", "translating") and remaining is not None:
        out["seconds_remaining"] = remaining
    if record["status"] == "done":
        out["billed_characters"] = record["characters"]
    if record["status"] == "failed":
        out["error_message"] = record["error"] or "the translation failed"
    return out


async def keyed_job(request: Request, document_id: str) -> dict[str, Any]:
    """The job, when the request's document_key is its key and the caller its client; 404 / 403 otherwise."""
    fields, _ = await read_fields(request)
    key = string(fields, "document_key", required=True)
    try:
        record = await jobs_of(request).get(document_id)
    except JobNotFound:
        raise DeepLError(404, "Document not found.") from None
    if record.get("client", "") != caller(request):
        raise DeepLError(404, "Document not found.")  # another key's document is not this key's to know of
    if not secrets.compare_digest(record["document_key"], key):
        raise DeepLError(403, "Invalid document_key for this document.")
    return record


def _formality(fields: dict[str, str]) -> None:
    formality = fields.get("formality")
    if formality in (None, *FORMALITY):
        return
    if formality in ("more", "less"):
        raise DeepLError(400, "'formality' is not supported for given 'target_lang'. Use prefer_more or prefer_less.")
    raise DeepLError(400, f"Value for 'formality' not supported. Send one of {', '.join(FORMALITY)}.")


NOT_FOUND = {
    403: error_schema("a wrong document_key (or API key)"),
    404: error_schema("no such document (unknown, expired, or another key's)"),
}
UPLOAD_RESPONSES = {
    **ERRORS,
    200: {
        "description": "the document accepted",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["document_id", "document_key"],
                    "properties": {"document_id": {"type": "string"}, "document_key": {"type": "string"}},
                }
            }
        },
    },
    404: error_schema("glossary_id names no glossary of this key"),
    413: error_schema("over MT_MAX_DOCUMENT_BYTES, _CHARS or _PAGES"),
    415: error_schema("a file type not served, or content of another format than its name says"),
}
STATUS_RESPONSES = {
    **ERRORS,
    **NOT_FOUND,
    200: {
        "description": "the document's status",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["document_id", "status"],
                    "properties": {
                        "document_id": {"type": "string"},
                        "status": {"type": "string", "enum": sorted(set(STATUS.values()))},
                        "seconds_remaining": {"type": "integer"},
                        "billed_characters": {"type": "integer"},
                        "error_message": {"type": "string"},
                    },
                }
            }
        },
    },
}
RESULT_RESPONSES = {
    **ERRORS,
    **NOT_FOUND,
    200: {"description": "the translated file", "content": {"application/octet-stream": {}}},
    503: error_schema("the document is not translated yet"),
}


async def _glossary(request: Request, fields: dict, source: str | None, target: str) -> dict | None:
    """The upload's glossary_id (this key's glossary for the document's pair), None without one."""
    if not fields.get("glossary_id"):
        return None
    if source is None:
        raise DeepLError(400, "Use of a glossary requires the source_lang parameter to be set.")
    glossary = await stored_glossary(request, fields["glossary_id"])
    if (glossary["source_language"], glossary["target_language"]) != (source, target):
        raise DeepLError(400, "The glossary's language pair is not the document's source_lang and target_lang.")
    return glossary


def build_deepl_document_router(app: FastAPI) -> APIRouter:
    router = APIRouter(prefix="/v2", route_class=DeepLRoute, tags=["DeepL API"])

    @router.post(
        "/document",
        responses=UPLOAD_RESPONSES,
        summary="Upload a document to translate (DeepL)",
        openapi_extra={
            "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": UPLOAD_SCHEMA}}}
        },
    )
    async def upload(request: Request) -> JSONResponse:
        registry = registry_of(request)  # 503 while loading or draining
        data, uploaded_name, fields = await upload_of(request, max_fields=1000)  # DeepL ignores unknown fields
        filename = fields.get("filename") or uploaded_name
        if not filename:
            raise DeepLError(400, "Parameter 'filename' not specified: the file has no name to tell its format.")
        asked_target = fields.get("target_lang")
        if not asked_target:
            raise DeepLError(400, "Parameter 'target_lang' not specified.")
        target = serving.target_code(asked_target, registry)
        source = serving.source_code(fields["source_lang"], registry) if fields.get("source_lang") else None
        _formality(fields)
        fmt = format_of(filename)  # 415 for a type not served
        output_format = fields.get("output_format")
        if output_format and output_format.lower().lstrip(".") != fmt:
            raise DeepLError(
                400, f"Value for 'output_format' not supported. This server writes {fmt} for a {fmt} file."
            )
        if fields.get("glossary_ids"):
            raise DeepLError(
                400, "Parameter 'glossary_ids' is not supported: one glossary per document; send glossary_id."
            )
        glossary = await _glossary(request, fields, source, target)
        quota, label = quota_of(request), caller(request)
        record = await jobs_of(request).submit(
            data, filename, source, target, None, label, request.app.state.mt.detector, glossary,
            lambda characters: quota.reserve(label, characters),  # 456 before anything is stored
        )  # fmt: skip
        request.scope["state"]["model"] = record["model"]
        return JSONResponse({"document_id": record["id"], "document_key": record["document_key"]})

    @router.post(
        "/document/{document_id}",
        responses=STATUS_RESPONSES,
        summary="A document's status (DeepL)",
        openapi_extra=KEY_BODY,
    )
    async def status(document_id: str, request: Request) -> dict[str, Any]:
        return deepl_status(await keyed_job(request, document_id))

    @router.post(
        "/document/{document_id}/result",
        responses=RESULT_RESPONSES,
        summary="Download a translated document (DeepL)",
        openapi_extra=KEY_BODY,
    )
    async def result(document_id: str, request: Request) -> Response:
        record = await keyed_job(request, document_id)
        if record["status"] == "failed":
            raise DeepLError(400, f"Document translation failed: {record['error']}")
        if record["status"] != "done":
            raise DeepLError(503, "Document not ready.")
        _, path = await jobs_of(request).result(document_id)
        return result_response(record, path)

    return router
