"""Every request counted, timed and logged once, whichever piece answered it; the count in flight while it runs
(SIGTERM's draining waits for it: service/__main__.py)."""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.middleware.paths import endpoint_label

log = logging.getLogger("service.access")
QUIET_ENDPOINTS = ("/metrics", "/healthz", "/readyz")  # polled by probes and Prometheus: counted, never logged


class Observe:
    def __init__(self, app: ASGIApp, state) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = endpoint_label(scope["path"])
        started = time.perf_counter()
        status = 500  # what a request counts as when nothing was sent

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        metrics = self.state.metrics
        metrics.in_flight.inc()
        self.state.in_flight += 1
        try:
            await self.app(scope, receive, observed)
        finally:
            self.state.in_flight -= 1
            metrics.in_flight.dec()
            elapsed = time.perf_counter() - started
            model = scope["state"].get("model", "")
            if endpoint != "other" or status != 404:
                metrics.requests.labels(endpoint, model, str(status)).inc()
                metrics.request_duration.labels(endpoint, model).observe(elapsed)
            if endpoint not in QUIET_ENDPOINTS and log.isEnabledFor(logging.INFO):  # (MT_LOG_LEVEL warning: no entry)
                _log_access(scope, endpoint, model, status, elapsed)


def _log_access(scope: Scope, endpoint: str, model: str, status: int, elapsed: float) -> None:
    state = scope["state"]
    extra = {
        "request_id": state["request_id"],
        "endpoint": endpoint,
        "model": model,
        "status": status,
        "latency_ms": round(elapsed * 1000, 2),
        "method": scope["method"],
        "batch_ids": state.get("batch_ids", []),
    }
    if "api_key" in state:  # the key's label, never the key
        extra["api_key"] = state["api_key"]
    if "texts" in state:  # only with MT_LOG_REQUESTS_TEXT=true
        extra["texts"] = state["texts"]
    log.info("%s %s %d", scope["method"], scope["path"][:200], status, extra=extra)
