"""The v1 endpoints, health, readiness and metrics."""

import asyncio
from collections.abc import Hashable
from typing import Any

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.errors import ERROR_RESPONSES, NotReady
from service.api.schemas import AttentionResponse, EmbedResponse, ModelsResponse, TranslateResponse, request_models
from service.engine.engine import Translation, alignment
from service.registry import LoadedModel
from service.scheduler import ShuttingDown
from service.tokenizer import EOS_ID

DISCONNECT_POLL_S = 0.05


def _validation_error(field: str, index: int | None, message: str, value: Any = None) -> RequestValidationError:
    loc: tuple = ("body", field) if index is None else ("body", field, index)
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": message, "input": value}])


def _timeout(request: Request, asked: float | None) -> float:
    """The request's deadline: body timeout_s, else the X-Request-Timeout header, else the default; capped."""
    s = request.app.state.mt.settings
    header = request.headers.get("x-request-timeout")
    if header is not None:  # checked even when the body's timeout_s wins: invalid input is never ignored
        try:
            seconds = float(header)
        except ValueError:
            raise _validation_error("X-Request-Timeout", None, "header X-Request-Timeout must be seconds") from None
        if not 0 < seconds <= 3600 or seconds != seconds:
            raise _validation_error("X-Request-Timeout", None, "header X-Request-Timeout must be in (0, 3600]")
        asked = seconds if asked is None else asked
    return min(asked if asked is not None else s.request_timeout_s, s.max_request_timeout_s)


def _model(request: Request, name: str | None) -> LoadedModel:
    state = request.app.state.mt
    if state.draining:
        raise ShuttingDown("the service is shutting down; retry on another instance")
    if not state.registry.ready:
        raise NotReady("models are still loading; retry shortly")
    model = state.registry.get(name)
    request.scope["state"]["model"] = model.name
    return model


def _source_ids(request: Request, model: LoadedModel, texts: list[str], field: str) -> list[list[int]]:
    limit = min(request.app.state.mt.settings.max_tokens_per_text, model.engine.max_source_tokens - 1)
    if request.app.state.mt.settings.log_requests_text:  # opt-in debugging only: texts go to the access log
        request.scope["state"].setdefault("texts", []).extend(texts)
    ids = model.engine.tokenizer.encode_batch(texts)
    for i, seq in enumerate(ids):
        if len(seq) > limit:
            raise _validation_error(
                field,
                i if field == "texts" else None,
                f"text has {len(seq)} subword tokens; the limit is {limit}: shorten or split it",
            )
    return [seq + [EOS_ID] for seq in ids]


async def _submit(request: Request, model: LoadedModel, kind: str, key, payloads: list[dict], timeout: float):
    """Queue the work; give up (dropping unstarted work) when the client disconnects."""
    scheduler = model.scheduler
    task = asyncio.ensure_future(
        scheduler.submit(
            kind,
            key,
            payloads,
            [len(p["ids"]) for p in payloads],
            timeout,
            request.scope["state"]["request_id"],
            request.scope["state"].setdefault("batch_ids", []),  # filled by the scheduler, read by the access log
        )
    )
    while True:
        done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()  # the scheduler drops the unstarted work and counts it (reason client_disconnected)
            raise asyncio.CancelledError


def _payloads(ids: list[list[int]], texts: list[str], hooks: bool) -> list[dict]:
    return [{"ids": i, "text": t} if hooks else {"ids": i} for i, t in zip(ids, texts, strict=True)]


def _translation_out(model: LoadedModel, t: Translation, body) -> dict[str, Any]:
    engine = model.engine
    out: dict[str, Any] = {
        "text": t.text,
        "score": t.score,
        "source_tokens": engine.pieces(t.source_ids),
        "target_tokens": engine.pieces(t.token_ids),
    }
    if body.num_hypotheses > 1:
        out["hypotheses"] = [{"text": text, "score": score} for text, score, _ in t.hypotheses]
    if t.attention is not None:
        if body.return_alignment:
            out["alignment"] = alignment(t.attention)
        if body.return_attention:
            out["attention"] = t.attention.tolist()
    elif body.return_alignment:
        out["alignment"] = []
    return out


def _select(matrix: np.ndarray, layers: list[int] | None, heads: list[int] | None, aggregate: str) -> list:
    if layers is not None:
        matrix = matrix[layers]
    if heads is not None:
        matrix = matrix[:, heads]
    if aggregate == "mean":
        matrix = matrix.mean(axis=1, keepdims=True)
    return matrix.tolist()


async def _submit_texts(request: Request, body: Any, kind: str, key: Hashable) -> tuple[LoadedModel, list[Any]]:
    """Tokenize ``body.texts`` for ``body.model`` and run them as one request of ``kind``; (model, results)."""
    model = _model(request, body.model)
    ids = _source_ids(request, model, body.texts, "texts")
    payloads = _payloads(ids, body.texts, request.app.state.mt.settings.enable_test_hooks)
    return model, await _submit(request, model, kind, key, payloads, _timeout(request, body.timeout_s))


def build_router(app: FastAPI) -> APIRouter:
    settings = app.state.mt.settings
    models = request_models(settings)
    TranslateRequest, EmbedRequest, AttentionRequest = models.translate, models.embed, models.attention
    router = APIRouter()
    # X-Request-Timeout is read in _timeout (so its errors say what to change); declared here for /openapi.json.
    timeout_header = {
        "parameters": [
            {
                "name": "X-Request-Timeout",
                "in": "header",
                "required": False,
                "description": f"deadline in seconds, in (0, 3600], capped at {settings.max_request_timeout_s}; the "
                "body's timeout_s wins when both are given. Work not started by then is dropped and answered 504.",
                "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
            }
        ]
    }

    def work_endpoint(path: str, response_model, summary: str):
        """POST route of a work endpoint: error responses and the deadline header documented alike."""
        return router.post(
            path,
            response_model=response_model,
            response_model_exclude_none=True,
            responses=ERROR_RESPONSES,
            openapi_extra=timeout_header,
            summary=summary,
        )

    @work_endpoint("/v1/translate", TranslateResponse, "Translate a batch of texts")
    async def translate(body: TranslateRequest, request: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        key = (
            "translate",
            body.beam_size,
            body.max_length,
            body.num_hypotheses,
            body.length_penalty,
            body.return_attention or body.return_alignment,
        )
        model, results = await _submit_texts(request, body, "translate", key)
        return {"model": model.name, "translations": [_translation_out(model, t, body) for t in results]}

    @work_endpoint("/v1/embed", EmbedResponse, "Sentence embeddings from the encoder")
    async def embed(body: EmbedRequest, request: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        model, vectors = await _submit_texts(request, body, "embed", ("embed", body.pooling, body.normalize))
        return {"model": model.name, "dimension": len(vectors[0]), "embeddings": [v.tolist() for v in vectors]}

    @work_endpoint("/v1/attention", AttentionResponse, "Encoder, decoder and cross attention, every layer and head")
    async def attention(body: AttentionRequest, request: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        model = _model(request, body.model)
        cfg = model.bundle.model_config
        n_layers = min(cfg["n_encoder_layers"], cfg["n_decoder_layers"])
        for field, values, bound in (("layers", body.layers, n_layers), ("heads", body.heads, cfg["n_heads"])):
            bad = [v for v in values or [] if v >= bound]
            if bad:
                raise _validation_error(
                    field, None, f"{field} {bad} out of range: this model has {bound} (0..{bound - 1})"
                )
        src = _source_ids(request, model, [body.source], "source")[0]
        payload: dict[str, Any] = {"ids": src}
        if body.target is not None:
            payload["target_ids"] = _source_ids(request, model, [body.target], "target")[0][:-1]
        if request.app.state.mt.settings.enable_test_hooks:
            payload["text"] = body.source
        [result] = await _submit(
            request, model, "attention", ("attention", id(payload)), [payload], _timeout(request, body.timeout_s)
        )
        out = {
            "model": model.name,
            **{k: result[k] for k in ("source_tokens", "target_tokens", "target_text", "score")},
        }
        for kind in body.kinds:
            out[kind] = _select(result[kind], body.layers, body.heads, body.aggregate)
        return out

    @router.get("/v1/models", response_model=ModelsResponse, responses=ERROR_RESPONSES, summary="Loaded models")
    async def list_models(request: Request) -> dict[str, Any]:
        state = request.app.state.mt
        if not state.registry.ready:
            raise NotReady("models are still loading; retry shortly")
        return {"default": state.settings.default_model, "models": [m.info() for m in state.registry.models.values()]}

    @router.get("/healthz", summary="Liveness: the process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "alive"}

    @router.get(
        "/readyz", summary="Readiness: every model loaded and warmed up", responses={503: {"description": "not ready"}}
    )
    async def readyz(request: Request) -> Response:
        state = request.app.state.mt
        if state.draining:
            return JSONResponse({"status": "draining"}, status_code=503, headers={"Retry-After": "5"})
        if not state.registry.ready:
            detail = state.registry.failed or "loading"
            return JSONResponse({"status": detail}, status_code=503, headers={"Retry-After": "2"})
        return JSONResponse({"status": "ready", "models": sorted(state.registry.models)})

    @router.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def metrics(request: Request) -> Response:
        return Response(generate_latest(request.app.state.mt.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return router
