"""The Open Inference Protocol's model repository and statistics extensions (Triton's HTTP API), under /v2.

Model repository: ``POST /v2/repository/index`` (body ``{"ready": true}`` lists only the served views) and, behind the
admin key (MT_ADMIN_KEY, header X-Admin-Key, as /v1's admin calls), ``POST /v2/repository/models/{name}/load`` and
``/unload``. A model is loaded and unloaded with both its views ({name} and {name}-embed name the same model). Load
serves a model that is not served (unloaded, or in the repository but not among MT_MODELS), or swaps the version of
a served one without downtime (service/models/registry.py). Its version: the highest on disk, or the one named by
``parameters.version`` or by a Triton ``config`` whose ``version_policy`` is ``{"specific": {"versions": [n]}}``.
Unload takes the model out of service: what it accepted finishes; later requests get 404 saying it is unloaded.

Statistics: ``GET /v2/models/stats``, ``/v2/models/{name}/stats``, ``/v2/models/{name}/versions/{v}/stats``, Triton's
``{"model_stats": [...]}`` from service/observability/inference_stats.py.

Errors are {"error": message} (tritonclient shows the message): 400 bad body, 403 admin key, 404 unknown model or
version, 503 while loading; a refused bundle (bad files, failed warm-up) is 400 and the serving version serves on.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from core.bundle import BundleError
from service.api.admin import admin_refusal
from service.api.requests import registry_of
from service.protocols.oip import mapping as inference_v2
from service.protocols.protocol_route import ProtocolError, error_schema

LOAD_REASON = "loaded by POST /v2/repository/models/{name}/load"


class RepositoryModel(BaseModel):
    name: str
    version: str
    state: str = Field(description="READY, or UNAVAILABLE (with its reason)")
    reason: str | None = None


class Duration(BaseModel):
    count: int
    ns: int


class InferenceStats(BaseModel):
    success: Duration
    fail: Duration
    queue: Duration
    compute_input: Duration
    compute_infer: Duration
    compute_output: Duration
    cache_hit: Duration
    cache_miss: Duration


class BatchStats(BaseModel):
    batch_size: int
    compute_input: Duration
    compute_infer: Duration
    compute_output: Duration


class ModelStats(BaseModel):
    name: str
    version: str
    last_inference: int = Field(description="milliseconds since the epoch; 0 before the first request")
    inference_count: int
    execution_count: int
    inference_stats: InferenceStats
    batch_stats: list[BatchStats]


class Statistics(BaseModel):
    model_stats: list[ModelStats]


ADMIN_ERRORS = {
    400: error_schema("invalid body, or the bundle was refused (the serving version serves on)"),
    401: error_schema("missing or invalid API key (when keys are configured)"),
    403: error_schema("admin key missing or wrong, or admin calls off (MT_ADMIN_KEY)"),
    404: error_schema("no such model in the repository, or no such version"),
    503: error_schema("models are still loading, or shutting down; see Retry-After"),
}
READ_ERRORS = {
    401: error_schema("missing or invalid API key (when keys are configured)"),
    404: error_schema("unknown model, unloaded, or a version not served"),
    503: error_schema("not ready, or shutting down; see Retry-After"),
}


def _admin(request: Request) -> None:
    refusal = admin_refusal(request)
    if refusal is not None:
        raise ProtocolError(403, refusal)


async def _parameters(request: Request) -> dict[str, Any]:
    """The ``parameters`` object of a load or unload body (empty or absent: none)."""
    body = await request.body()
    if not body.strip():
        return {}
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        raise ProtocolError(400, "the body is not valid JSON") from None
    if not isinstance(payload, dict):
        raise ProtocolError(400, 'the body must be a JSON object, e.g. {"parameters": {}}')
    parameters = payload.get("parameters", {})
    if not isinstance(parameters, dict):
        raise ProtocolError(400, "parameters must be a JSON object")
    return parameters


def _version(parameters: dict[str, Any]) -> str | None:
    """The version a load asks for: ``parameters.version``, or a Triton config's specific version policy."""
    files = sorted(k for k in parameters if k.startswith("file:"))
    if files:
        raise ProtocolError(400, f"this server loads models from its repository only; {files[0]!r} is not accepted")
    version = parameters.get("version")
    config = parameters.get("config")
    if config is not None:
        version = _config_version(config)
    if version is None:
        return None
    version = str(version)
    if not version.isdigit() or len(version) > 9:
        raise ProtocolError(400, f"version must be a version folder number, got {version!r}")
    return version


def _config_version(config: Any) -> str | None:
    try:
        parsed = json.loads(config) if isinstance(config, str) else None
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        raise ProtocolError(400, "parameters.config must be a JSON object in a string (a Triton model config)")
    unknown = sorted(set(parsed) - {"name", "version_policy"})
    if unknown:
        raise ProtocolError(400, f"of a model config only version_policy is honoured here; got {unknown}")
    policy = parsed.get("version_policy") or {"latest": {"num_versions": 1}}
    if policy == {"latest": {"num_versions": 1}} or policy == {"latest": {}}:
        return None
    versions = policy.get("specific", {}).get("versions") if isinstance(policy, dict) else None
    if isinstance(versions, list) and len(versions) == 1 and isinstance(versions[0], int | str):
        return str(versions[0])
    raise ProtocolError(400, "version_policy must be {'latest': {'num_versions': 1}} or one specific version")


def _body(properties: dict[str, Any], description: str) -> dict[str, Any]:
    """The OpenAPI request body of a load or unload: Triton's ``{"parameters": {...}}``, optional."""
    schema = {"type": "object", "properties": {"parameters": {"type": "object", "properties": properties}}}
    return {"requestBody": {"required": False, "description": description,
                            "content": {"application/json": {"schema": schema}}}}  # fmt: skip


LOAD_BODY = _body(
    {
        "config": {"type": "string", "description": "a Triton model config (JSON); only version_policy is honoured"},
        "version": {"type": "string", "pattern": "^[0-9]{1,9}$", "description": "ours: the version folder"},
    },
    "optional; the highest version on disk when no version is named",
)
UNLOAD_BODY = _body({"unload_dependents": {"type": "boolean"}}, "optional; nothing depends on another model here")


def add_repository_routes(router: APIRouter) -> None:
    @router.post(
        "/repository/index",
        response_model=list[RepositoryModel],
        response_model_exclude_none=True,
        responses=READ_ERRORS,
        summary="Models of the repository and their state",
    )
    async def repository_index(request: Request) -> list[dict[str, str]]:
        registry = registry_of(request)
        parameters = await request.body()
        ready_only = False
        if parameters.strip():
            try:
                payload = json.loads(parameters)
            except (ValueError, RecursionError):
                raise ProtocolError(400, "the body is not valid JSON") from None
            ready_only = isinstance(payload, dict) and payload.get("ready") is True
        return inference_v2.repository_index(registry, ready_only)

    @router.post(
        "/repository/models/{model_name}/load",
        response_model=RepositoryModel,
        response_model_exclude_none=True,
        responses=ADMIN_ERRORS,
        summary="Load a model, or another version of it (admin)",
        openapi_extra=LOAD_BODY,
    )
    async def load(request: Request, model_name: str) -> dict[str, str]:
        _admin(request)
        version = _version(await _parameters(request))
        registry = registry_of(request)
        name = inference_v2.model_of(registry, model_name)
        try:
            model, _ = await registry.load_model(name, version, LOAD_REASON)
        except BundleError as exc:
            if "no version" in str(exc):
                raise ProtocolError(404, str(exc)) from None
            raise ProtocolError(400, _refused(registry, name, exc)) from None
        except RuntimeError as exc:
            raise ProtocolError(400, _refused(registry, name, exc)) from None
        request.scope["state"]["model"] = name
        return {"name": model_name, "version": model.version, "state": "READY"}

    @router.post(
        "/repository/models/{model_name}/unload",
        response_model=RepositoryModel,
        response_model_exclude_none=True,
        responses=ADMIN_ERRORS,
        summary="Take a model out of service (admin)",
        openapi_extra=UNLOAD_BODY,
    )
    async def unload(request: Request, model_name: str) -> dict[str, str]:
        _admin(request)
        await _parameters(request)  # unload_dependents: nothing here depends on another model
        registry = registry_of(request)
        model = await registry.unload(inference_v2.model_of(registry, model_name))
        request.scope["state"]["model"] = model.name
        return {"name": model_name, "version": model.version, "state": "UNAVAILABLE", "reason": "unloaded"}


def _refused(registry, name: str, exc: Exception) -> str:
    serving = registry.models.get(name)
    after = f"; version {serving.version} serves on" if serving is not None else ""
    return f"failed to load {name!r}: {exc}{after}"


def add_statistics_routes(router: APIRouter) -> None:
    """Declared before /models/{model_name}: ``/models/stats`` is not a model's metadata."""

    @router.get("/models/stats", response_model=Statistics, responses=READ_ERRORS, summary="Statistics of every model")
    async def all_statistics(request: Request) -> dict[str, Any]:
        return {"model_stats": inference_v2.statistics(registry_of(request))}

    @router.get(
        "/models/{model_name}/stats", response_model=Statistics, responses=READ_ERRORS, summary="A model's statistics"
    )
    async def model_statistics(request: Request, model_name: str) -> dict[str, Any]:
        return {"model_stats": inference_v2.statistics(registry_of(request), model_name)}

    @router.get(
        "/models/{model_name}/versions/{model_version}/stats",
        response_model=Statistics,
        responses=READ_ERRORS,
        summary="A model version's statistics",
    )
    async def version_statistics(request: Request, model_name: str, model_version: str) -> dict[str, Any]:
        return {"model_stats": inference_v2.statistics(registry_of(request), model_name, model_version)}
