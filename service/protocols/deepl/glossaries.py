"""DeepL's glossary API (v2) on the stored glossaries of /v1/glossaries: the same records in the state store, the
same owner (the calling key's label), the same validation and limits (service/serving/glossaries.py), so a glossary
made through either API is seen, used and deleted through the other.

- ``GET /v2/glossary-language-pairs``: every pair a loaded model serves (DeepL lists lower-case codes);
- ``POST /v2/glossaries`` (JSON or form: ``name``, ``source_lang``, ``target_lang``, ``entries``, ``entries_format``
  tsv or csv): 201 with the glossary; 400 for a bad field or entry, 456 when the key keeps MT_GLOSSARIES_PER_KEY;
- ``GET /v2/glossaries``, ``GET|DELETE /v2/glossaries/{id}``: 404 for an id this key does not own;
- ``GET /v2/glossaries/{id}/entries``: the entries as TSV (``Accept: text/tab-separated-values``, the only format
  DeepL serves; another Accept is 415).

DeepL's multilingual ``/v3/glossaries`` is not served: the ``deepl`` client (1.32) calls it only from
``DeepLClient``'s ``*_multilingual_glossary`` methods; ``create_glossary`` and ``translate_text(glossary=...)`` use v2.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from service.api.requests import registry_of
from service.protocols.deepl import mapping as serving
from service.protocols.deepl.common import ERRORS, DeepLError, DeepLRoute, error_schema, read_fields, string
from service.protocols.v1.glossaries import glossaries_of, limits_of, owner_of
from service.serving.glossaries import FORMATS, check_entries, parse_entries
from service.state.store import Record

TSV = "text/tab-separated-values"
MAX_NAME_CHARS = 200  # as /v1/glossaries
# a name must hold one character that str.strip() keeps, the blanks listed one by one: with the pattern "\S" the
# schema fuzzer generated the name "\x1d", which str.strip() and Python's re count as blank (CI of 2026-12-02)
NAME_PATTERN = r"[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
GLOSSARY_SCHEMA = {
    "type": "object",
    "required": ["glossary_id", "name", "ready", "source_lang", "target_lang", "creation_time", "entry_count"],
    "properties": {
        "glossary_id": {"type": "string"},
        "name": {"type": "string"},
        "ready": {"type": "boolean"},
        "source_lang": {"type": "string"},
        "target_lang": {"type": "string"},
        "creation_time": {"type": "string", "format": "date-time"},
        "entry_count": {"type": "integer"},
    },
}
CREATE_SCHEMA = {
    "type": "object",
    "required": ["name", "source_lang", "target_lang", "entries", "entries_format"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": NAME_PATTERN},
        "source_lang": {"type": "string", "minLength": 1, "description": "a source language served, e.g. DE"},
        "target_lang": {"type": "string", "minLength": 1, "description": "a target language served, e.g. EN"},
        "entries": {"type": "string", "minLength": 1, "description": "source<TAB>target a line, or two CSV columns"},
        "entries_format": {"type": "string", "enum": list(FORMATS)},
    },
}
ENTRIES_FORMAT_RULE = "Value for 'entries_format' not supported. Send tsv or csv."


def deepl_glossary(record: Record) -> dict[str, Any]:
    """A stored glossary as DeepL shows it (always ready: it is stored whole before the answer)."""
    return {
        "glossary_id": record["glossary_id"],
        "name": record["name"],
        "ready": True,
        "source_lang": record["source_language"],
        "target_lang": record["target_language"],
        "creation_time": record["creation_time"],
        "entry_count": record["entry_count"],
    }


def tsv(entries: list[list[str]]) -> str:
    return "".join(f"{source}\t{target}\n" for source, target in entries)


async def stored_glossary(request: Request, glossary_id: str) -> Record:
    """This key's glossary ``glossary_id`` (GlossaryNotFound, DeepL's 404, otherwise)."""
    return await glossaries_of(request).get(owner_of(request), glossary_id)


NOT_FOUND = {404: error_schema("no glossary of this id for this key")}
ONE_GLOSSARY = {200: {"description": "the glossary", "content": {"application/json": {"schema": GLOSSARY_SCHEMA}}}}
CREATE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": CREATE_SCHEMA,
                "example": {
                    "name": "pets",
                    "source_lang": "de",
                    "target_lang": "en",
                    "entries": "Hund\thound",
                    "entries_format": "tsv",
                },
            },
            "application/x-www-form-urlencoded": {"schema": CREATE_SCHEMA},
        },
    }
}


LIST_RESPONSES = {
    **ERRORS,
    200: {
        "description": "this key's glossaries",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["glossaries"],
                    "properties": {"glossaries": {"type": "array", "items": GLOSSARY_SCHEMA}},
                }
            }
        },
    },
}


ENTRIES_RESPONSES = {
    **ERRORS,
    **NOT_FOUND,
    200: {"description": "source<TAB>target a line", "content": {TSV: {"schema": {"type": "string"}}}},
    415: error_schema("an Accept header without text/tab-separated-values"),
}


def build_deepl_glossary_router(app: FastAPI) -> APIRouter:
    router = APIRouter(prefix="/v2", route_class=DeepLRoute, tags=["DeepL API"])

    @router.get("/glossary-language-pairs", responses=ERRORS, summary="Glossary language pairs (DeepL)")
    async def language_pairs(request: Request) -> dict[str, Any]:
        pairs = sorted(registry_of(request).pairs())
        return {"supported_languages": [{"source_lang": s, "target_lang": t} for s, t in pairs]}

    @router.post(
        "/glossaries",
        status_code=201,
        responses={
            **ERRORS,
            201: ONE_GLOSSARY[200],
            456: error_schema("the key already keeps the most glossaries allowed (MT_GLOSSARIES_PER_KEY)"),
        },
        summary="Create a glossary (DeepL)",
        openapi_extra=CREATE_BODY,
    )
    async def create(request: Request) -> JSONResponse:
        fields, _ = await read_fields(request)
        registry = registry_of(request)
        name = string(fields, "name", required=True)
        if not re.search(NAME_PATTERN, name) or len(name) > MAX_NAME_CHARS:
            message = f"Value for 'name' not supported. Send 1 to {MAX_NAME_CHARS} characters, not all blank."
            raise DeepLError(400, message)
        source = serving.source_code(string(fields, "source_lang", required=True), registry)
        target = serving.target_code(string(fields, "target_lang", required=True), registry)
        entries_format = string(fields, "entries_format", required=True)
        if entries_format not in FORMATS:
            raise DeepLError(400, ENTRIES_FORMAT_RULE)
        text = string(fields, "entries", required=True)
        limits = limits_of(request.app)
        entries = check_entries(parse_entries(text, entries_format), limits)
        glossaries, pair = glossaries_of(request), (source, target)
        record = await glossaries.create(owner_of(request), name, pair, entries, registry.pairs())
        return JSONResponse(deepl_glossary(record), status_code=201)

    @router.get(
        "/glossaries",
        responses=LIST_RESPONSES,
        summary="List glossaries (DeepL)",
    )
    async def listing(request: Request) -> dict[str, Any]:
        return {"glossaries": [deepl_glossary(r) for r in await glossaries_of(request).list(owner_of(request))]}

    @router.get(
        "/glossaries/{glossary_id}",
        responses={**ERRORS, **NOT_FOUND, **ONE_GLOSSARY},
        summary="A glossary (DeepL)",
    )
    async def get(glossary_id: str, request: Request) -> dict[str, Any]:
        return deepl_glossary(await stored_glossary(request, glossary_id))

    @router.get(
        "/glossaries/{glossary_id}/entries",
        responses=ENTRIES_RESPONSES,
        summary="A glossary's entries as TSV (DeepL)",
    )
    async def entries(glossary_id: str, request: Request) -> Response:
        record = await stored_glossary(request, glossary_id)
        accept = request.headers.get("accept", "")
        if accept and not any(t in accept for t in (TSV, "*/*", "text/*")):
            raise DeepLError(415, f"Unsupported Accept header {accept!r}: entries are served as {TSV}.")
        return Response(tsv(record["entries"]), media_type=TSV)

    @router.delete(
        "/glossaries/{glossary_id}",
        status_code=204,
        responses={**ERRORS, **NOT_FOUND, 204: {"description": "deleted"}},
        summary="Delete a glossary (DeepL)",
    )
    async def delete(glossary_id: str, request: Request) -> Response:
        await glossaries_of(request).delete(owner_of(request), glossary_id)
        return Response(status_code=204)

    return router
