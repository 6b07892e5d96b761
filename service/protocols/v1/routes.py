"""The v1 endpoints, health, readiness and metrics: HTTP in and out; the work is the serving layer's."""

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.errors import ERROR_RESPONSES, NotReady
from service.api.requests import InvalidDeadline, deadline_s, registry_of, request_context
from service.models.registry import LoadedModel
from service.protocols.v1 import attention as attention_serving
from service.protocols.v1 import embed as embed_serving
from service.protocols.v1 import streaming as streaming
from service.protocols.v1 import translate as translate_serving
from service.protocols.v1.glossaries import request_terms
from service.protocols.v1.schemas import (
    AttentionResponse,
    EmbedResponse,
    ModelsResponse,
    TranslateResponse,
    request_models,
)
from service.serving.context import RequestContext
from service.serving.directions import PivotRefused
from service.serving.routing import route


def _header_error(header: str, message: str) -> RequestValidationError:
    """A 422 for a request header (loc ["header", name])."""
    return RequestValidationError([{"type": "value_error", "loc": ("header", header), "msg": message, "input": None}])


def _model(request: Request, name: str | None) -> LoadedModel:
    model = registry_of(request).get(name)
    request.scope["state"]["model"] = model.name
    return model


def _directed(request: Request, body: Any) -> LoadedModel:
    """The model of a /v1/attention request in the direction it names (service/serving/routing.py); a direction
    served by pivot has no single attention: PivotRefused (422)."""
    state = request.app.state.mt
    languages = body.source_language, body.target_language
    [model], _ = route(state.registry, [body.source], body.model, *languages, state.detector)
    if model.pivot is not None:
        raise PivotRefused("target_language", model, "attention")
    request.scope["state"]["model"] = model.name
    return model


def _context(request: Request, body: Any) -> RequestContext:
    """The serving layer's context; a bad X-Request-Timeout is a 422 naming the header."""
    try:
        timeout_s = deadline_s(request, body.timeout_s)
    except InvalidDeadline as exc:
        raise _header_error("X-Request-Timeout", str(exc)) from None
    return request_context(request, timeout_s, request.app.state.mt.quality)


async def _translate_context(request: Request, body: Any) -> RequestContext:
    """The context of a translate request, with its glossary and do-not-translate spans."""
    ctx = _context(request, body)
    ctx.terms = await request_terms(request, body)
    ctx.protect_spans = getattr(body, "protect_spans", True)
    ctx.protect_names = getattr(body, "protect_names", True)
    return ctx


STREAM_RESPONSE = {
    200: {
        "description": 'the translations; with "stream": true Server-Sent Events (delta, translation, error, done)',
        "content": {
            "text/event-stream": {
                "schema": {  # one Server-Sent Event; data is one JSON object (README, Streaming)
                    "type": "object",
                    "properties": {
                        "event": {"type": "string", "enum": ["delta", "translation", "error", "done"]},
                        "data": {"type": "string"},
                    },
                    "required": ["event", "data"],
                }
            }
        },
    }
}


def _timeout_header(max_request_timeout_s: float) -> dict[str, Any]:
    """X-Request-Timeout is read by deadline_s (so its errors say what to change); declared for /openapi.json."""
    return {
        "parameters": [
            {
                "name": "X-Request-Timeout",
                "in": "header",
                "required": False,
                "description": "deadline in seconds, in (0, 3600], capped at "
                f"{max_request_timeout_s}; the body's timeout_s wins when both are given. Work not "
                "started by then is dropped and answered 504.",
                "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
            }
        ]
    }


def _readiness(state) -> Response:
    """/readyz: 503 while draining, loading or restarting an engine; else ready, with the state store's health."""
    if state.draining:
        return JSONResponse({"status": "draining"}, status_code=503, headers={"Retry-After": "5"})
    if not state.registry.ready:
        detail = state.registry.failed or "loading"
        return JSONResponse({"status": detail}, status_code=503, headers={"Retry-After": "2"})
    restarting = state.registry.restarting()
    if restarting:  # after an engine fault (service/execution/worker.py); queued work waits for the fresh engine
        detail = f"engine restarting after a fault: {', '.join(restarting)}"
        return JSONResponse({"status": detail}, status_code=503, headers={"Retry-After": "2"})
    answer = {"status": "ready", "models": sorted(state.registry.models)}
    if state.link is not None:  # Redis down never makes a replica unready: it serves on, degraded
        answer["state_store"] = "redis" if state.link.up else "degraded: Redis unreachable, local state"
    return JSONResponse(answer)


def build_router(app: FastAPI) -> APIRouter:
    settings = app.state.mt.settings
    models = request_models(settings.limits)
    TranslateRequest, EmbedRequest, AttentionRequest = models.translate, models.embed, models.attention
    router = APIRouter()
    timeout_header = _timeout_header(settings.limits.max_request_timeout_s)

    def work_endpoint(path: str, response_model, summary: str, responses: dict | None = None):
        """POST route of a work endpoint: error responses and the deadline header documented alike."""
        return router.post(
            path,
            response_model=response_model,
            response_model_exclude_none=True,
            responses={**ERROR_RESPONSES, **(responses or {})},
            openapi_extra=timeout_header,
            summary=summary,
        )

    @work_endpoint("/v1/translate", TranslateResponse, "Translate a batch of texts", STREAM_RESPONSE)
    async def translate(body: TranslateRequest, request: Request) -> Any:  # type: ignore[valid-type]
        state = request.app.state.mt
        if getattr(body, "stream", False):  # text/event-stream (service/protocols/v1/streaming.py)
            request.scope["state"]["model"] = body.model or state.settings.repository.default_model
            ctx = await _translate_context(request, body)
            return await streaming.translate_events(registry_of(request), body, ctx, state.detector)
        ctx = await _translate_context(request, body)
        answer = await translate_serving.translate(registry_of(request), body, ctx, state.detector)
        request.scope["state"]["model"] = answer["model"]
        return answer

    @work_endpoint("/v1/embed", EmbedResponse, "Sentence embeddings from the encoder")
    async def embed(body: EmbedRequest, request: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        return await embed_serving.embed(_model(request, body.model), body, _context(request, body))

    @work_endpoint("/v1/attention", AttentionResponse, "Encoder, decoder and cross attention, every layer and head")
    async def attention(body: AttentionRequest, request: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        return await attention_serving.attention(_directed(request, body), body, _context(request, body))

    @router.get("/v1/models", response_model=ModelsResponse, responses=ERROR_RESPONSES, summary="Loaded models")
    async def list_models(request: Request) -> dict[str, Any]:
        state = request.app.state.mt
        if not state.registry.ready:
            raise NotReady("models are still loading; retry shortly")
        models = [state.registry.info(name) for name in state.registry.models]
        return {"default": state.settings.repository.default_model, "models": models}

    @router.get("/healthz", summary="Liveness: the process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "alive"}

    @router.get(
        "/readyz", summary="Readiness: every model loaded and warmed up", responses={503: {"description": "not ready"}}
    )
    async def readyz(request: Request) -> Response:
        return _readiness(request.app.state.mt)

    @router.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def metrics(request: Request) -> Response:
        return Response(generate_latest(request.app.state.mt.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return router
