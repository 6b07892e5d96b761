"""The DeepL API v2 under /v2, beside the Open Inference Protocol (no path of one is a path of the other):
POST /v2/translate, GET|POST /v2/languages, GET|POST /v2/usage, for DeepL's clients pointed at this server
(``deepl.Translator(key, server_url=...)``).

Keys come as DeepL sends them (``Authorization: DeepL-Auth-Key <key>``; also ``Bearer``) and go through the same
access control, rate limits, fair turns and load shedding as /v1 (service/api/middleware/); each key has a
character quota (MT_KEY_CHARACTER_LIMIT, service/access/quota.py). Fields come as JSON or as a form (``text`` repeated);
docs/protocols.md lists every field and status, honoured, accepted and ignored, or refused. Errors and fields:
service/protocols/deepl/common.py; languages, routing and answers: service/protocols/deepl/mapping.py.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from engine.decoding import beam_within
from service.access.quota import UNLIMITED
from service.api.limits import too_long_hint
from service.api.requests import InvalidDeadline, deadline_s, registry_of, request_context
from service.protocols.deepl import mapping as serving
from service.protocols.deepl.common import (
    ERRORS,
    DeepLError,
    DeepLRoute,
    boolean,
    caller,
    message_response,
    one,
    quota_of,
    read_fields,
    string,
    strings,
)
from service.protocols.deepl.glossaries import stored_glossary
from service.serving.html import HTML, Markup
from service.serving.segmentation import NO_NEWLINES
from service.serving.terms import Terms

SPLIT = {"0": False, "1": True, NO_NEWLINES: NO_NEWLINES}
FORMALITY = ("default", "more", "less", "prefer_more", "prefer_less")
MODEL_TYPES = ("latency_optimized", "quality_optimized", "prefer_quality_optimized")
# features this server does not have: translating as if they were applied would silently answer something else
REFUSED = {
    "glossary_ids": "one glossary per request here; send it as glossary_id",
    "style_id": "this server has no style rules",
    "style_rule": "this server has no style rules",
    "translation_memory_id": "this server has no translation memories",
    "custom_instructions": "this server's models take no instructions",
}
ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

TAGS = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}], "description": "comma-separated"}
BOOLEAN = {"anyOf": [{"type": "boolean"}, {"type": "string", "enum": ["0", "1", "true", "false"]}]}
TRANSLATE_SCHEMA = {
    "type": "object",
    "required": ["text", "target_lang"],
    "properties": {
        "text": {
            "anyOf": [{"type": "array", "items": {"type": "string"}, "minItems": 1}, {"type": "string"}],
            "description": "texts to translate (a form repeats the field)",
        },
        "source_lang": {"type": "string", "description": "DE, EN, ZH...; left out: detected"},
        "target_lang": {"type": "string", "minLength": 1, "description": "EN-US, EN-GB, EN, DE, ZH..."},
        "split_sentences": {"anyOf": [{"type": "string", "enum": list(SPLIT)}, {"type": "integer", "enum": [0, 1]}]},
        "preserve_formatting": BOOLEAN,
        "formality": {"type": "string", "enum": list(FORMALITY)},
        "tag_handling": {"type": "string", "enum": ["html", "xml"]},
        "ignore_tags": TAGS,
        "splitting_tags": TAGS,
        "non_splitting_tags": TAGS,
        "outline_detection": BOOLEAN,
        "show_billed_characters": BOOLEAN,
        "context": {"type": "string"},
        "glossary_id": {"type": "string", "minLength": 1, "description": "a glossary of this key; needs source_lang"},
        "model_type": {"type": "string", "enum": list(MODEL_TYPES)},
    },
}
TRANSLATE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": TRANSLATE_SCHEMA,
                "example": {"text": ["Ein Hund läuft."], "target_lang": "EN-US"},
            },
            "application/x-www-form-urlencoded": {"schema": TRANSLATE_SCHEMA},
        },
    }
}
TRANSLATIONS = {
    200: {
        "description": "one translation per text, in order",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["translations"],
                    "properties": {
                        "translations": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["detected_source_language", "text"],
                                "properties": {
                                    "detected_source_language": {"type": "string"},
                                    "text": {"type": "string"},
                                    "billed_characters": {"type": "integer"},
                                    "model_type_used": {"type": "string"},
                                },
                            },
                        }
                    },
                }
            }
        },
    }
}


def _tags(fields: dict, name: str, xml: bool) -> frozenset[str]:
    """A tag list: names given as a list or comma-separated (lower case for HTML, whose names are)."""
    names = {t.strip() for value in strings(fields, name) for t in value.split(",") if t.strip()}
    return frozenset(n if xml else n.lower() for n in names)


def _split(fields: dict, fmt: str) -> bool | str:
    value = one(fields, "split_sentences")
    if value is None:
        return NO_NEWLINES if fmt == "html" else True  # DeepL's defaults
    key = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(key, str) or key not in SPLIT:  # an object or a list is no key of SPLIT (nor hashable)
        raise DeepLError(400, "Value for 'split_sentences' not supported. Send 0, 1 or nonewlines.")
    return SPLIT[key]


def parse_translate(fields: dict, registry, max_texts: int, max_chars: int, beam: int) -> serving.Request:
    """Our request from DeepL's fields; 400 naming the field for anything this server cannot do as asked."""
    for name, why in REFUSED.items():
        if one(fields, name) is not None:
            raise DeepLError(400, f"Parameter '{name}' is not supported: {why}.")
    texts = strings(fields, "text")
    if not texts:
        raise DeepLError(400, "Parameter 'text' not specified.")
    if len(texts) > max_texts:
        raise DeepLError(
            400, f"Too many texts: {len(texts)}; at most {max_texts} per request (MT_MAX_TEXTS_TRANSLATE)."
        )
    for i, text in enumerate(texts):
        if len(text) > max_chars:
            message = f"Text {i} has {len(text)} characters; {too_long_hint(max_chars, 'POST /v2/document')}."
            raise DeepLError(400, message)
    target = serving.target_code(string(fields, "target_lang", required=True), registry)
    source_lang = string(fields, "source_lang")
    source = serving.source_code(source_lang, registry) if source_lang else None
    tag_handling = string(fields, "tag_handling")
    if tag_handling not in (None, "html", "xml"):
        raise DeepLError(400, "Value for 'tag_handling' not supported. Send html or xml.")
    xml = tag_handling == "xml"
    fmt = "html" if tag_handling else "text"
    formality = string(fields, "formality")
    if formality not in (None, *FORMALITY):
        raise DeepLError(400, f"Value for 'formality' not supported. Send one of {', '.join(FORMALITY)}.")
    if formality in ("more", "less"):  # DeepL: formality on a target without it fails unless prefer_*
        raise DeepLError(400, "'formality' is not supported for given 'target_lang'. Use prefer_more or prefer_less.")
    model_type = string(fields, "model_type")
    if model_type not in (None, *MODEL_TYPES):
        raise DeepLError(400, f"Value for 'model_type' not supported. Send one of {', '.join(MODEL_TYPES)}.")
    if model_type == "quality_optimized":
        message = "Value for 'model_type' not supported. This server has one model per language pair; "
        raise DeepLError(400, message + "use latency_optimized or prefer_quality_optimized.")
    string(fields, "context")  # accepted (checked, never billed), not used: the models translate sentences alone
    boolean(fields, "preserve_formatting", False)  # accepted: nothing here re-cases or re-punctuates a translation
    # every field is checked whether it is used or not: a wrong value is a 400, never silently ignored
    tags = {name: _tags(fields, name, xml) for name in ("ignore_tags", "splitting_tags", "non_splitting_tags")}
    outline = boolean(fields, "outline_detection", True)
    rules = HTML
    if tag_handling:
        rules = Markup(
            xml=xml,
            ignore=tags["ignore_tags"],
            splitting=tags["splitting_tags"],
            non_splitting=tags["non_splitting_tags"],
            outline=outline,
        )
    return serving.Request(texts, source, target, _split(fields, fmt), fmt, rules, beam)


LANGUAGES_RESPONSE = {
    200: {
        "description": "source languages, or (type=target) target languages with supports_formality",
        "content": {
            "application/json": {
                "schema": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["language", "name"],
                        "properties": {
                            "language": {"type": "string"},
                            "name": {"type": "string"},
                            "supports_formality": {"type": "boolean"},
                        },
                    },
                }
            }
        },
    }
}
TYPE_PARAMETER = {
    "parameters": [
        {
            "name": "type",
            "in": "query",
            "required": False,
            "schema": {"type": "string", "enum": ["source", "target"]},
        }
    ]
}


async def _languages(request: Request) -> JSONResponse:
    fields, _ = await read_fields(request)  # the deepl client sends type in a form body, even with GET
    kind = string(fields, "type")
    kind = "source" if kind is None else kind
    registry = registry_of(request)
    if kind == "source":
        return JSONResponse(serving.source_languages(registry))
    if kind == "target":
        return JSONResponse(serving.target_languages(registry))
    raise DeepLError(400, "Value for 'type' not supported. Send source or target.")


USAGE_RESPONSE = {
    200: {
        "description": "characters translated for the calling key, and its limit",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["character_count", "character_limit"],
                    "properties": {"character_count": {"type": "integer"}, "character_limit": {"type": "integer"}},
                }
            }
        },
    }
}


async def _usage(request: Request) -> dict[str, Any]:
    found = await quota_of(request).usage(caller(request))
    return {"character_count": found.count, "character_limit": found.limit or UNLIMITED}


def build_deepl_router(app: FastAPI) -> APIRouter:
    s = app.state.mt.settings
    router = APIRouter(prefix="/v2", route_class=DeepLRoute, tags=["DeepL API"])
    beam = beam_within(s.limits.max_beam_size)  # no beam field: the model's default unless the cap is lower

    @router.post(
        "/translate",
        responses={**ERRORS, **TRANSLATIONS},
        summary="Translate texts (DeepL)",
        openapi_extra=TRANSLATE_BODY,
    )
    async def translate(request: Request) -> JSONResponse:
        fields, _ = await read_fields(request)
        registry = registry_of(request)
        req = parse_translate(fields, registry, s.limits.max_texts_translate, s.limits.max_chars_per_text, beam)
        show_billed = boolean(fields, "show_billed_characters", False)
        model_type = one(fields, "model_type")
        billed = [serving.billed_characters(t, req.fmt, req.rules) for t in req.texts]
        ctx = _context(request)
        ctx.terms = await _glossary_terms(request, fields, req)
        quota, label = quota_of(request), caller(request)
        await quota.reserve(label, sum(billed))  # 456 when it would pass the key's limit; nothing charged then
        try:
            translations, first = await serving.translate(registry, req, ctx)
        except BaseException:
            await quota.give_back(label, sum(billed))
            raise
        request.scope["state"]["model"] = first.name
        for t, n in zip(translations, billed, strict=True):
            if show_billed:
                t["billed_characters"] = n
            if model_type is not None:
                t["model_type_used"] = "latency_optimized"
        return JSONResponse({"translations": translations})

    # GET and POST each their own operation (one route for both would give both the same operation id, which
    # FastAPI warns about, in plain text, whenever /openapi.json is built)
    for method in ("GET", "POST"):
        router.add_api_route(
            "/languages",
            _languages,
            methods=[method],
            responses={**ERRORS, **LANGUAGES_RESPONSE},
            summary="Languages served (DeepL)",
            openapi_extra=TYPE_PARAMETER,
            operation_id=f"deepl_languages_{method.lower()}",
        )
        router.add_api_route(
            "/usage",
            _usage,
            methods=[method],
            responses={**ERRORS, **USAGE_RESPONSE},
            summary="Usage (DeepL)",
            operation_id=f"deepl_usage_{method.lower()}",
        )

    # Any other method on these paths: 405 in DeepL's form (not the inference protocol's catch-all, if any)
    allowed = {"/translate": "POST", "/languages": "GET, POST", "/usage": "GET, POST"}
    for path, methods in allowed.items():
        others = [m for m in ALL_METHODS if m not in methods.split(", ") and not (m == "HEAD" and "GET" in methods)]
        router.add_api_route(path, _wrong_method(methods), methods=others, include_in_schema=False)
    return router


async def _glossary_terms(request: Request, fields: dict, req: serving.Request) -> Terms | None:
    """The terms of the request's ``glossary_id`` (this key's stored glossary), None without one; DeepL's 400 when
    source_lang is left out or the glossary is for another pair, 404 for an unknown id."""
    glossary_id = string(fields, "glossary_id")
    if glossary_id is None:
        return None
    if req.source is None:
        raise DeepLError(400, "Use of a glossary requires the source_lang parameter to be set.")
    record = await stored_glossary(request, glossary_id)
    pair = (record["source_language"], record["target_language"])
    if pair != (req.source, req.target):
        message = f"The glossary is for {pair[0].upper()}->{pair[1].upper()}; the request asks for "
        raise DeepLError(400, message + f"{req.source.upper()}->{req.target.upper()}.")
    return Terms(dict(record["entries"]), [], pair, glossary_id)


def _context(request: Request):
    """The serving layer's context, with the language policy (MT_LANGUAGE_MISMATCH=reject refuses a text in another
    language than its model's source: 400); a bad X-Request-Timeout is a 400."""
    try:
        return request_context(request, deadline_s(request), request.app.state.mt.quality)
    except InvalidDeadline as exc:
        raise DeepLError(400, str(exc)) from None


def _wrong_method(allowed: str):
    async def wrong_method(request: Request) -> JSONResponse:
        message = f"Method {request.method} not allowed on {request.url.path}; use {allowed}."
        return message_response(405, message, {"Allow": allowed})

    return wrong_method
