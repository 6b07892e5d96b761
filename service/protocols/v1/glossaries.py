"""/v1/glossaries: create (JSON, or a TSV / CSV upload), list, get, entries, delete (docs/glossaries.md).

The work is service/serving/glossaries.py's; here are HTTP bodies and the owner of a request: the label of its API
key (``scope["state"]["api_key"]``, set by the access middleware), "" when the server has no API keys.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from service.api.errors import ERROR_RESPONSES
from service.api.requests import registry_of
from service.serving.glossaries import (
    Glossaries,
    GlossaryInvalid,
    GlossaryLimit,
    GlossaryLimits,
    GlossaryNotFound,
    check_entries,
    check_spans,
    parse_entries,
    public,
)
from service.serving.terms import Terms

Language = Field(pattern="^[a-z]{2}$", description="ISO 639-1 code")


class GlossaryCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"name": "medical", "source_language": "de", "target_language": "en", "entries": {"Arzt": "physician"}}
            ]
        },
    )
    name: str = Field(min_length=1, max_length=200)
    source_language: str = Language
    target_language: str = Language
    entries: dict[str, str] | str = Field(
        description="source term -> target term, or the entries as TSV / CSV text (entries_format)"
    )
    entries_format: str = Field("tsv", pattern="^(tsv|csv)$", description="format of entries given as text")


CREATE_SCHEMA = GlossaryCreate.model_json_schema()


class GlossaryOut(BaseModel):
    glossary_id: str
    name: str
    source_language: str
    target_language: str
    entry_count: int
    creation_time: str


class GlossaryList(BaseModel):
    glossaries: list[GlossaryOut]


class GlossaryEntries(BaseModel):
    entries: dict[str, str]


def limits_of(app: FastAPI) -> GlossaryLimits:
    s = app.state.mt.settings.state
    return GlossaryLimits(s.glossary_max_entries, s.glossary_max_term_chars, s.glossaries_per_key)


def glossaries_of(request: Request) -> Glossaries:
    return Glossaries(request.app.state.mt.store, limits_of(request.app))


def owner_of(request: Request) -> str:
    """Whose glossaries the request sees: its API key's label ("" without API keys)."""
    return request.scope.get("state", {}).get("api_key", "")


async def _creation(request: Request) -> GlossaryCreate:
    """The create request from a JSON body or a multipart form (fields name, source_language, target_language,
    entries_format (default: from the file name, else tsv) and the file ``entries``)."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form()
        upload = form.get("entries")
        if upload is None or isinstance(upload, str):
            raise GlossaryInvalid("the form needs the file 'entries' (TSV or CSV)", "entries")
        raw = await upload.read()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise GlossaryInvalid("the entries file must be UTF-8 text", "entries") from None
        default_format = "csv" if (upload.filename or "").lower().endswith(".csv") else "tsv"
        data: Any = {k: form.get(k) for k in ("name", "source_language", "target_language") if form.get(k) is not None}
        data |= {"entries": text, "entries_format": form.get("entries_format") or default_format}
    else:
        try:
            data = await request.json()
        except ValueError:
            message = "the body must be JSON (Content-Type: application/json) or a multipart form with a file"
            raise RequestValidationError(
                [{"type": "json_invalid", "loc": ("body",), "msg": message, "input": None}]
            ) from None
    try:
        return GlossaryCreate.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False, include_context=False)]
        ) from None


def install(app: FastAPI) -> None:
    @app.exception_handler(GlossaryNotFound)
    async def not_found(_: Request, exc: GlossaryNotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(GlossaryLimit)
    async def too_many(_: Request, exc: GlossaryLimit) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)


def build_glossary_router() -> APIRouter:
    router = APIRouter()
    responses = {
        **ERROR_RESPONSES,
        404: {"description": "no glossary of this id for this API key"},
        422: {"description": "an invalid glossary: the detail's loc names the field (docs/glossaries.md)"},
    }

    @router.post(
        "/v1/glossaries",
        status_code=201,
        response_model=GlossaryOut,
        responses={**responses, 409: {"description": "the key keeps the most glossaries allowed"}},
        summary="Store a glossary (JSON entries, TSV / CSV text, or a TSV / CSV file upload)",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": CREATE_SCHEMA}}}},
    )
    async def create(request: Request) -> dict[str, Any]:
        body = await _creation(request)
        limits = limits_of(request.app)
        if isinstance(body.entries, str):
            pairs = parse_entries(body.entries, body.entries_format)
        else:
            pairs = list(body.entries.items())
        entries = check_entries(pairs, limits)
        served = registry_of(request).pairs()
        pair = (body.source_language, body.target_language)
        record = await glossaries_of(request).create(owner_of(request), body.name, pair, entries, served)
        return public(record)

    @router.get("/v1/glossaries", response_model=GlossaryList, responses=responses, summary="This key's glossaries")
    async def listing(request: Request) -> dict[str, Any]:
        return {"glossaries": [public(r) for r in await glossaries_of(request).list(owner_of(request))]}

    @router.get("/v1/glossaries/{glossary_id}", response_model=GlossaryOut, responses=responses, summary="A glossary")
    async def get(glossary_id: str, request: Request) -> dict[str, Any]:
        return public(await glossaries_of(request).get(owner_of(request), glossary_id))

    @router.get(
        "/v1/glossaries/{glossary_id}/entries",
        response_model=GlossaryEntries,
        responses=responses,
        summary="A glossary's entries (source term -> target term)",
    )
    async def entries(glossary_id: str, request: Request) -> dict[str, Any]:
        return {"entries": dict((await glossaries_of(request).get(owner_of(request), glossary_id))["entries"])}

    @router.delete("/v1/glossaries/{glossary_id}", status_code=204, responses=responses, summary="Delete a glossary")
    async def delete(glossary_id: str, request: Request) -> Response:
        await glossaries_of(request).delete(owner_of(request), glossary_id)
        return Response(status_code=204)

    return router


async def request_terms(request: Request, body: Any) -> Terms | None:
    """The terms of a translate request: its stored glossary (``glossary_id``, this key's), its inline ``glossary``
    (wins over a stored entry of the same source term) and its ``do_not_translate`` spans; None when it has none."""
    glossary_id = getattr(body, "glossary_id", None)
    inline = getattr(body, "glossary", None)
    spans = getattr(body, "do_not_translate", None)
    if glossary_id is None and not inline and not spans:
        return None
    limits = limits_of(request.app)
    entries: dict[str, str] = {}
    pair = None
    if glossary_id is not None:
        record = await glossaries_of(request).get(owner_of(request), glossary_id)
        entries = dict(record["entries"])
        pair = (record["source_language"], record["target_language"])
    if inline:
        given = check_entries(inline.items(), limits, "glossary")
        folded = {" ".join(k.casefold().split()): k for k in entries}
        for source, target in given.items():
            entries.pop(folded.get(" ".join(source.casefold().split()), source), None)
            entries[source] = target
    return Terms(entries, check_spans(spans or [], limits), pair, glossary_id)
