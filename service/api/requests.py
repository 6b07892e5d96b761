"""What every API (v1, v2, LibreTranslate) asks of a request alike: a ready registry, and the serving layer's
RequestContext. Each API reads its deadline its own way (and reports a bad one in its own error form)."""

from __future__ import annotations

from fastapi import Request

from service.api.errors import NotReady
from service.registry import Registry
from service.scheduling.errors import ShuttingDown
from service.serving.context import RequestContext


def registry_of(request: Request) -> Registry:
    """The registry, once every model is loaded; ShuttingDown (503) while draining, NotReady (503) while loading."""
    state = request.app.state.mt
    if state.draining:
        raise ShuttingDown("the service is shutting down; retry on another instance")
    if not state.registry.ready:
        raise NotReady("models are still loading; retry shortly")
    return state.registry


def request_context(request: Request, timeout_s: float, quality=None) -> RequestContext:
    """The serving layer's view of this request: id, deadline, batch ids for the access log, disconnects."""
    state = request.scope["state"]
    logged = state.setdefault("texts", []) if request.app.state.mt.settings.log_requests_text else None
    return RequestContext(
        request_id=state["request_id"],
        timeout_s=timeout_s,
        batch_ids=state.setdefault("batch_ids", []),  # filled by the scheduler, read by the access log
        is_disconnected=request.is_disconnected,
        logged_texts=logged,  # opt-in debugging only: texts go to the access log
        quality=quality,
        client=state.get("api_key", ""),  # set by the middleware (or LibreTranslate's key check)
    )
