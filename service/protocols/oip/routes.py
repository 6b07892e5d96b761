"""Open Inference Protocol v2 over HTTP (KServe's required_api.md, Triton's HTTP/REST API), under /v2.

Health, server and model metadata, model readiness, and inference with JSON tensors or Triton's binary tensor
data extension (a JSON header of ``Inference-Header-Content-Length`` bytes followed by the tensors' bytes; BYTES
elements as a 4-byte little-endian length and the UTF-8 bytes). Errors are {"error": message}: 400 for a bad
request, 404 for an unknown model or version, 413/429/503/504 as /v1 answers them. The models and their views
are service/protocols/oip/mapping.py's; limits, API keys and metrics are /v1's.
"""

from __future__ import annotations

import json
import math
import struct
import time
from typing import Annotated, Any, Literal

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from service.api.limits import too_long_hint
from service.api.requests import registry_of
from service.observability.inference_stats import RequestTiming
from service.protocols.oip import mapping as inference_v2
from service.protocols.oip.extensions import add_repository_routes, add_statistics_routes
from service.protocols.protocol_route import (
    ProtocolError,
    ProtocolRoute,
    check_unicode,
    context_of,
    error_schema,
)
from service.serving.quality import WARNINGS_HEADER, warnings_header
from service.settings import LimitSettings

BINARY_HEADER = "inference-header-content-length"
SERVER_NAME = "mtserve"
SERVER_VERSION = "0.1.0"
EXTENSIONS = ["binary_tensor_data", "model_repository", "statistics"]


def inline_refs(schema: dict) -> dict:
    """A JSON schema with its ``$defs`` substituted in place (OpenAPI operations get self-contained schemas)."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.split("/")[-1]])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


Scalar = bool | int | float | str  # parameter values: $parameter in KServe's required_api.md


def _integral(value: object) -> object:
    """Strict integers, except that 2.0 counts as 2 (JSON Schema says it is an integer)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def request_models(limits: LimitSettings) -> tuple[type[BaseModel], type[BaseModel]]:
    def bounded(ge: int, le: int | None = None):
        """An integer within bounds that /openapi.json states (minimum, maximum): the bounds come before the
        validator, where pydantic can put them on the integer's own schema."""
        return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_integral), Field(strict=True)]

    class Parameters(BaseModel):
        model_config = ConfigDict(extra="allow", strict=True)  # clients send their own (Triton: priority, ...)
        __pydantic_extra__: dict[str, Scalar] = Field(init=False)  # the protocol's parameters are scalars
        beam_size: bounded(1, limits.max_beam_size) | None = Field(None, description="absent: the model's default")
        max_length: bounded(1, limits.max_length_cap) | None = Field(None, description="generated tokens per text")
        length_penalty: float | None = Field(None, ge=0.0, le=5.0, description="absent: the model's default")
        split_sentences: bool = True
        format: Literal["text", "html"] = "text"
        source_language: str | None = Field(None, pattern="^([a-z]{2}|auto)$", description="a direction of the model")
        target_language: str | None = Field(None, pattern="^[a-z]{2}$", description="absent: the model's own pair")
        pooling: Literal["mean", "max"] = "mean"
        normalize: bool = True
        binary_data_output: bool = False
        timeout: bounded(1, 3_600_000_000) | None = Field(None, description="deadline in microseconds (Triton)")

    class TensorParameters(BaseModel):
        model_config = ConfigDict(extra="allow", strict=True)
        __pydantic_extra__: dict[str, Scalar] = Field(init=False)
        binary_data_size: bounded(0) | None = None
        binary_data: bool | None = None

    class InputTensor(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        name: Literal["TEXT"]
        # any rank the protocol allows (its element count is the number of texts); 8 dimensions bound the work
        shape: list[bounded(0)] = Field(min_length=1, max_length=8)
        datatype: Literal["BYTES"]
        parameters: TensorParameters | None = None
        data: list[str | list[Any]] | None = Field(None, description="strings, row-major (flat, or nested by shape)")

    class RequestedOutput(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        name: Literal["TRANSLATION", "SCORE", "EMBEDDING"]
        parameters: TensorParameters | None = None

    class InferRequest(BaseModel):
        model_config = ConfigDict(
            extra="ignore",  # the protocol's schema allows other top-level fields: ignored, as Triton ignores them
            strict=True,
            json_schema_extra={
                "examples": [
                    {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["Ein Hund läuft."]}]}
                ]
            },
        )
        id: str | None = Field(None, max_length=256)
        model_name: str | None = Field(None, max_length=256, description="sent by KServe's client; the path decides")
        model_version: str | None = Field(None, max_length=64, description="ignored: the path decides")
        parameters: Parameters | None = None
        inputs: list[InputTensor] = Field(min_length=1, max_length=1)
        outputs: list[RequestedOutput] | None = Field(None, max_length=3)

    return InferRequest, Parameters


class OutputTensor(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class InferResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: dict[str, Any] | None = None
    outputs: list[OutputTensor]


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]
    parameters: dict[str, Any] | None = None


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class Live(BaseModel):
    live: bool


class Ready(BaseModel):
    ready: bool


class ModelReady(BaseModel):
    name: str
    ready: bool


ERRORS = {
    400: error_schema("invalid request: the message names the field"),
    401: error_schema("missing or invalid API key (when keys are configured)"),
    404: error_schema("unknown model, or a version not served"),
    413: error_schema("request body too large, or more sentences than the server queues"),
    429: error_schema("queue full; see Retry-After"),
    500: error_schema("internal error (the log has it under the request id)"),
    503: error_schema("not ready, or shutting down; see Retry-After"),
    504: error_schema("the deadline passed before the work could start"),
}


# --- tensors ------------------------------------------------------------------------------------------------
def _flatten(data: Any) -> list[Any]:
    """Nested lists' elements in row-major order (iteratively: nesting depth is the client's choice)."""
    out, stack = [], [iter([data])]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            stack.append(iter(item))
        else:
            out.append(item)
    return out


_END = object()


def decode_bytes_tensor(raw: bytes) -> list[bytes]:
    """Triton's BYTES serialisation: each element a 4-byte little-endian length, then that many bytes."""
    out, at = [], 0
    while at < len(raw):
        if at + 4 > len(raw):
            raise ProtocolError(400, "binary TEXT data is truncated (an element length needs 4 bytes)")
        (n,) = struct.unpack_from("<I", raw, at)
        at += 4
        if at + n > len(raw):
            raise ProtocolError(400, "binary TEXT data is truncated (an element is shorter than its length)")
        out.append(raw[at : at + n])
        at += n
    return out


def encode_bytes_tensor(values: list[str]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in (v.encode("utf-8", "replace") for v in values))


def _texts(tensor: Any, binary: bytes) -> list[str]:
    """The input's strings, from its JSON ``data`` or its binary part; checked against its shape."""
    size = tensor.parameters.binary_data_size if tensor.parameters else None
    if size is not None:
        if tensor.data is not None:
            raise ProtocolError(400, "input TEXT has both data and binary_data_size; send one")
        if size != len(binary):
            message = f"input TEXT: binary_data_size is {size} but {len(binary)} bytes follow the header"
            raise ProtocolError(400, message)
        elements: list[Any] = decode_bytes_tensor(binary)
    elif tensor.data is None:
        raise ProtocolError(400, "input TEXT has no data (give data, or binary_data_size with the binary extension)")
    else:
        elements = _flatten(tensor.data)
    texts = []
    for i, element in enumerate(elements):
        if isinstance(element, bytes):
            try:
                element = element.decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolError(400, f"input TEXT element {i} is not UTF-8") from None
        if not isinstance(element, str):
            raise ProtocolError(400, f"input TEXT element {i} must be a string, got {type(element).__name__}")
        texts.append(check_unicode(element, f"input TEXT element {i}"))
    if math.prod(tensor.shape) != len(texts):
        raise ProtocolError(400, f"input TEXT has shape {tensor.shape} but {len(texts)} elements")
    return texts


def _parse(body: bytes, header_length: str | None, model) -> tuple[Any, bytes]:
    """(the validated request, its binary part)."""
    binary = b""
    if header_length is not None:
        if not header_length.isdigit() or int(header_length) > len(body):
            raise ProtocolError(400, f"Inference-Header-Content-Length {header_length!r} is not a length of the body")
        body, binary = body[: int(header_length)], body[int(header_length) :]
    try:
        payload = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ProtocolError(400, f"the request is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(payload, dict):
        raise ProtocolError(400, "the request must be a JSON object with 'inputs'")
    return model.model_validate(payload), binary  # a ValidationError is answered 400 by ProtocolRoute


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _encode_output(name: str, array: np.ndarray, binary: bool) -> tuple[dict[str, Any], bytes]:
    datatype = "BYTES" if array.dtype == object else "FP32"
    entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
    if binary:
        raw = encode_bytes_tensor(list(array)) if datatype == "BYTES" else array.astype("<f4").tobytes()
        entry["parameters"] = {"binary_data_size": len(raw)}
        return entry, raw
    entry["data"] = [str(v) for v in array.ravel()] if datatype == "BYTES" else [float(v) for v in array.ravel()]
    return entry, b""


def _infer_response(parsed, view, used, arrays, names, wanted, params) -> Response:
    """The outputs asked for (all when none is named), as JSON or binary tensors; X-MT-Warnings names each text's
    warnings (service/serving/quality.py warnings_header) when it has any."""
    shape = list(parsed.inputs[0].shape)
    entries, blobs = [], []
    binary_by_name = {o.name: bool(o.parameters and o.parameters.binary_data) for o in wanted}
    for name in [o.name for o in wanted] or names:
        array = arrays[name]
        if name != "EMBEDDING":
            array = array.reshape(shape)
        entry, blob = _encode_output(name, array, binary_by_name.get(name, params.binary_data_output))
        entries.append(entry)
        blobs.append(blob)
    answer: dict[str, Any] = {"model_name": view.name, "model_version": used.version, "outputs": entries}
    if parsed.id is not None:
        answer["id"] = parsed.id
    headers = {}
    if "WARNINGS" in arrays:
        header = warnings_header([json.loads(w) for w in arrays["WARNINGS"]])
        if header is not None:
            headers[WARNINGS_HEADER] = header
    header = json.dumps(answer).encode()  # ASCII: \u escapes, also for whatever a client put in id
    if not any(blobs):
        return Response(header, media_type="application/json", headers=headers)
    headers["Inference-Header-Content-Length"] = str(len(header))
    return Response(header + b"".join(blobs), media_type="application/octet-stream", headers=headers)


def stats_of(request: Request):
    return request.app.state.mt.registry.stats


def _since(started: float) -> float:
    return time.perf_counter() - started


def _infer_route(infer_request: type[BaseModel]) -> dict[str, Any]:
    """The infer operations' OpenAPI: the request body (JSON, or binary tensors after a JSON header) and answers."""
    infer_body = {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_refs(infer_request.model_json_schema())}},
            "description": "JSON, or (Triton's binary tensor data extension) a JSON header of "
            "Inference-Header-Content-Length bytes followed by the binary tensors",
        }
    }
    infer_responses = {
        **ERRORS,
        200: {
            "description": "outputs (binary after a JSON header when asked with binary_data_output / binary_data)",
            "content": {
                "application/json": {"schema": inline_refs(InferResponse.model_json_schema())},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
        },
    }
    return {"responses": infer_responses, "openapi_extra": infer_body, "response_class": Response}


def _check_texts(texts: list[str], kind: str, limits: LimitSettings) -> None:
    """400 for more texts than a request may hold, or a text over MT_MAX_CHARS_PER_TEXT."""
    limit = limits.max_texts_embed if kind == "embed" else limits.max_texts_translate
    if len(texts) > limit:
        raise ProtocolError(400, f"input TEXT has {len(texts)} elements; at most {limit} per request")
    for i, text in enumerate(texts):
        if len(text) > limits.max_chars_per_text:
            limit = limits.max_chars_per_text
            hint = too_long_hint(limit, "POST /v1/documents")
            raise ProtocolError(400, f"text {i} has {len(text)} characters; at most {limit}: {hint}")


async def _metadata(request: Request, model_name: str, model_version: str | None) -> dict[str, Any]:
    view = inference_v2.view_of(registry_of(request), model_name, model_version)
    request.scope["state"]["model"] = view.model.name
    return view.metadata()


async def _model_ready(request: Request, model_name: str, model_version: str | None) -> dict[str, Any]:
    view = inference_v2.view_of(registry_of(request), model_name, model_version)
    request.scope["state"]["model"] = view.model.name
    return {"name": view.name, "ready": True}


async def _infer(
    request: Request, model_name: str, model_version: str | None, limits: LimitSettings, infer_request, parameters
) -> Response:
    """One inference: the body parsed (JSON or binary), its texts within the limits, the model's outputs; counted in
    the statistics once the request reaches the model."""
    view = inference_v2.view_of(registry_of(request), model_name, model_version)
    request.scope["state"]["model"] = view.model.name
    body = await request.body()
    parsed, binary = _parse(body, request.headers.get(BINARY_HEADER), infer_request)
    texts = _texts(parsed.inputs[0], binary)
    _check_texts(texts, view.kind, limits)
    params = parsed.parameters or parameters()
    names = [o["name"] for o in view.outputs]
    wanted = parsed.outputs or []
    for out in wanted:
        if out.name not in names:
            raise ProtocolError(400, f"model {view.name} has no output {out.name}; its outputs are {names}")
    # a valid request reaches the model from here: it counts in the statistics, as a success or a failure
    started, timing, version = time.perf_counter(), RequestTiming(), view.model.version
    try:
        timeout = params.timeout / 1e6 if params.timeout is not None else None
        ctx = context_of(request, timeout, timing)
        arrays, used = await inference_v2.infer(view, texts, params.model_dump(exclude_unset=True), ctx)
        version = used.version
        response = _infer_response(parsed, view, used, arrays, names, wanted, params)
    except BaseException:
        stats_of(request).request(view.model.name, view.kind, version, False, _since(started), timing, len(texts))
        raise
    stats_of(request).request(view.model.name, view.kind, version, True, _since(started), timing, len(texts))
    return response


# --- routes -------------------------------------------------------------------------------------------------
def build_v2_router(app: FastAPI) -> APIRouter:
    limits = app.state.mt.settings.limits
    InferRequest, Parameters = request_models(limits)
    router = APIRouter(prefix="/v2", route_class=ProtocolRoute, tags=["Open Inference Protocol v2"])

    @router.get("", response_model=ServerMetadata, responses=ERRORS, summary="Server metadata")
    async def server_metadata() -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS}

    # /v2/ answered here, not redirected: Starlette's slash redirect names an absolute http:// URL (wrong behind TLS)
    router.add_api_route("/", server_metadata, methods=["GET"], include_in_schema=False)

    @router.get("/health/live", response_model=Live, responses=ERRORS, summary="Server liveness")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @router.get(
        "/health/ready",
        response_model=Ready,
        responses={**ERRORS, 503: {"description": "not ready", "model": Ready}},
        summary="Server readiness: every model loaded and warmed up",
    )
    async def ready(request: Request) -> Response:
        state = request.app.state.mt
        if state.draining or not state.registry.ready or state.registry.restarting():
            return JSONResponse({"ready": False}, status_code=503, headers={"Retry-After": "2"})
        return JSONResponse({"ready": True})

    add_repository_routes(router)
    add_statistics_routes(router)  # before /models/{model_name}, which would take "stats" for a model name

    # the same three operations with and without /versions/{model_version}
    model_path, version_path = "/models/{model_name}", "/models/{model_name}/versions/{model_version}"

    @router.get(model_path, response_model=ModelMetadata, responses=ERRORS, summary="Model metadata")
    async def model_metadata(request: Request, model_name: str) -> dict[str, Any]:
        return await _metadata(request, model_name, None)

    @router.get(version_path, response_model=ModelMetadata, responses=ERRORS, summary="Model metadata (a version)")
    async def model_version_metadata(request: Request, model_name: str, model_version: str) -> dict[str, Any]:
        return await _metadata(request, model_name, model_version)

    @router.get(model_path + "/ready", response_model=ModelReady, responses=ERRORS, summary="Model readiness")
    async def ready_model(request: Request, model_name: str) -> dict[str, Any]:
        return await _model_ready(request, model_name, None)

    @router.get(
        version_path + "/ready", response_model=ModelReady, responses=ERRORS, summary="Model readiness (a version)"
    )
    async def ready_model_version(request: Request, model_name: str, model_version: str) -> dict[str, Any]:
        return await _model_ready(request, model_name, model_version)

    infer_route = _infer_route(InferRequest)

    @router.post(model_path + "/infer", summary="Inference", **infer_route)
    async def infer_model(request: Request, model_name: str) -> Response:
        return await _infer(request, model_name, None, limits, InferRequest, Parameters)

    @router.post(version_path + "/infer", summary="Inference (a version)", **infer_route)
    async def infer_model_version(request: Request, model_name: str, model_version: str) -> Response:
        return await _infer(request, model_name, model_version, limits, InferRequest, Parameters)

    return router
