"""ASGI middleware: request ids, API keys (and their rate limits), body size limit, metrics and the access log."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.keys import match_key
from service.scheduling.errors import KeyQueueFull

log = logging.getLogger("service.access")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
WORK_PATHS = ("/v1/translate", "/v1/embed", "/v1/attention")  # requests that queue engine work
OPERATIONS_PATHS = ("/healthz", "/readyz", "/metrics")  # open by default (MT_OPEN_PATHS), closable with API keys
KNOWN_ENDPOINTS = {"/v1/translate", "/v1/embed", "/v1/attention", "/v1/models", "/healthz", "/readyz", "/metrics", "/"}
# Open Inference Protocol v2 (service/api/v2.py) and the LibreTranslate API (service/api/libretranslate.py):
# their errors are {"error": ...}; v2 needs an API key like /v1, LibreTranslate's key is checked in its handlers.
LIBRETRANSLATE_PATHS = ("/translate", "/detect", "/languages")
_V2_ENDPOINTS = [
    (re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?/infer$"), "/v2/models/{name}/infer"),
    (re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?/ready$"), "/v2/models/{name}/ready"),
    (re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?$"), "/v2/models/{name}"),
    (re.compile(r"^/v2(/health/live|/health/ready|/repository/index)?$"), None),  # the path is its own label
]


def endpoint_label(path: str) -> str:
    """The metrics label of a path: the path of a known endpoint, a template for v2 model paths, else "other"."""
    if path in KNOWN_ENDPOINTS or path in LIBRETRANSLATE_PATHS:
        return path
    for pattern, label in _V2_ENDPOINTS:
        if pattern.match(path):
            return label or path
    return "other"


def is_work_path(path: str) -> bool:
    """Requests that queue engine work (refused up front with 429 when every queue is full)."""
    return path in WORK_PATHS or path == "/translate" or _V2_ENDPOINTS[0][0].match(path) is not None


def error_body(path: str, message: str, status: int = 0) -> dict:
    """An error in the form of the path's protocol: {"error": ...} for v2 and LibreTranslate (whose 429 says
    "Slowdown: ..."), else {"detail": ...}."""
    if path in LIBRETRANSLATE_PATHS:
        return {"error": ("Slowdown: " if status == 429 else "") + message}
    if path == "/v2" or path.startswith("/v2/"):
        return {"error": message}
    return {"detail": message}


async def _send_json(send: Send, status: int, body: dict, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class BodyTooLarge(HTTPException):
    """Raised while the body streams in; an HTTPException so body parsing re-raises it rather than answering 400."""

    def __init__(self) -> None:
        super().__init__(413, "request body too large")


class ServiceMiddleware:
    """Outermost layer: every response gets X-Request-ID and is counted, timed and logged once."""

    def __init__(self, app: ASGIApp, state) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        s = self.state.settings
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("x-request-id", "")
        request_id = given if _SAFE_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        path = scope["path"]
        endpoint = endpoint_label(path)
        started = time.perf_counter()
        status_holder = {"status": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        self.state.metrics.in_flight.inc()
        self.state.in_flight += 1
        try:
            authorized, label = self._authorized(scope["method"], path, headers)
            if not authorized:
                await _send_json(
                    send_wrapper,
                    401,
                    error_body(
                        path, "missing or invalid API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
                    ),
                    [(b"www-authenticate", b"Bearer")],
                )
                return
            length = headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > s.max_body_bytes:
                await _send_json(
                    send_wrapper,
                    413,
                    error_body(
                        path,
                        f"request body of {length} bytes exceeds the limit of "
                        f"{s.max_body_bytes} bytes; send fewer or shorter texts",
                    ),
                )
                return
            if label:
                scope["state"]["api_key"] = label  # whose work it is (limits, fair turns, metrics, the access log)
            work = scope["method"] == "POST" and is_work_path(path)
            limited = self.state.key_rates.check(label, time.monotonic()) if label and work else None
            if limited is not None:  # the key is over its rate limit: refused before anything is read
                await self._discard_body(receive)
                self.state.metrics.key_rejections.labels(label, "rate_limit").inc()
                retry = str(limited.retry_after).encode()
                await _send_json(send_wrapper, 429, error_body(path, str(limited), 429), [(b"retry-after", retry)])
                return
            refusal = self._queue_full(scope["method"], path, label)
            if refusal is not None:  # no request could be queued: refuse before parsing, validating, tokenizing
                await self._discard_body(receive)
                scope["state"]["model"] = refusal[0]
                if label:
                    reason = "key_queue_full" if isinstance(refusal[1], KeyQueueFull) else "queue_full"
                    self.state.metrics.key_rejections.labels(label, reason).inc()
                retry = str(refusal[1].retry_after).encode()
                await _send_json(send_wrapper, 429, error_body(path, str(refusal[1]), 429), [(b"retry-after", retry)])
                return
            try:
                await self.app(scope, self._limited(receive, s.max_body_bytes), send_wrapper)
            except BodyTooLarge:
                await _send_json(
                    send_wrapper,
                    413,
                    error_body(
                        path, f"request body exceeds the limit of {s.max_body_bytes} bytes; send fewer or shorter texts"
                    ),
                )
        finally:
            self.state.in_flight -= 1
            self.state.metrics.in_flight.dec()
            elapsed = time.perf_counter() - started
            model = scope["state"].get("model", "")
            status = status_holder["status"]
            if endpoint != "other" or status != 404:
                self.state.metrics.requests.labels(endpoint, model, str(status)).inc()
                self.state.metrics.request_duration.labels(endpoint, model).observe(elapsed)
            if endpoint not in ("/metrics", "/healthz", "/readyz"):
                extra = {
                    "request_id": request_id,
                    "endpoint": endpoint,
                    "model": model,
                    "status": status,
                    "latency_ms": round(elapsed * 1000, 2),
                    "method": scope["method"],
                    "batch_ids": scope["state"].get("batch_ids", []),
                }
                if "api_key" in scope["state"]:  # the key's label, never the key
                    extra["api_key"] = scope["state"]["api_key"]
                if "texts" in scope["state"]:  # only with MT_LOG_REQUESTS_TEXT=true
                    extra["texts"] = scope["state"]["texts"]
                log.info("%s %s %d", scope["method"], path[:200], status, extra=extra)

    def _authorized(self, method: str, path: str, headers: dict[str, str]) -> tuple[bool, str]:
        """(whether the request may pass, the label of its API key or ""). With MT_API_KEYS set, /v1/*, /v2/* and
        the operations endpoints need a key unless listed in MT_OPEN_PATHS."""
        s = self.state.settings
        keys = s.api_keys
        protected = path.startswith(("/v1/", "/v2/")) or path == "/v2" or path in OPERATIONS_PATHS
        if not keys or path in s.open_paths or not protected:
            return True, ""
        if method == "OPTIONS" and s.cors_origins and "access-control-request-method" in headers:
            return True, ""  # a CORS preflight: browsers send it without credentials
        offered = headers.get("x-api-key", "")
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            offered = auth[7:].strip()
        label = match_key(offered, keys)
        return label is not None, label or ""

    def _queue_full(self, method: str, path: str, client: str = ""):
        """(model, QueueFull) when every loaded model's queue is full (or, for an API key, the key's share of every
        queue), so no work request can be accepted now."""
        registry = self.state.registry
        if method != "POST" or not is_work_path(path) or self.state.draining or not registry.ready:
            return None
        refusals = [(name, m.scheduler.refusal(1, client)) for name, m in registry.models.items()]
        if not refusals or any(refusal is None for _, refusal in refusals):
            return None
        return min(refusals, key=lambda r: r[1].retry_after)

    @staticmethod
    async def _discard_body(receive: Receive) -> None:
        """Read the request body to its end (keep-alive needs it consumed); nothing is parsed."""
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return

    @staticmethod
    def _limited(receive: Receive, limit: int) -> Receive:
        seen = 0

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge
            return message

        return wrapped
