"""What every API (v1, v2, LibreTranslate) asks of a request alike: a ready registry, its deadline, and the serving
layer's RequestContext. Each API reports a bad deadline in its own error form."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import Request

from service.api.errors import NotReady
from service.models.registry import Registry
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


class InvalidDeadline(ValueError):
    """X-Request-Timeout is not a number of seconds in (0, 3600]."""


def deadline_s(request: Request, asked_s: float | None = None) -> float:
    """The request's deadline, in seconds from now: ``asked_s`` (the body's timeout_s, or a protocol's own
    parameter), else the X-Request-Timeout header, else MT_REQUEST_TIMEOUT_S; capped at MT_MAX_REQUEST_TIMEOUT_S.
    The header is checked even when ``asked_s`` wins: invalid input is never ignored (InvalidDeadline)."""
    s = request.app.state.mt.settings
    header = request.headers.get("x-request-timeout")
    if header is not None:
        try:
            seconds = float(header)
        except ValueError:
            raise InvalidDeadline("header X-Request-Timeout must be seconds") from None
        if not 0 < seconds <= 3600:  # NaN fails it too
            raise InvalidDeadline("header X-Request-Timeout must be in (0, 3600]")
        asked_s = seconds if asked_s is None else asked_s
    return min(asked_s if asked_s is not None else s.limits.request_timeout_s, s.limits.max_request_timeout_s)


SPURIOUS_WAKE_S = 0.05  # after a receive that was not the disconnect (none comes once the body is read)


def client_gone(request: Request) -> Callable[[], Awaitable[None]]:
    """Waits until the client of ``request`` has gone away. The body is read before work is queued, so the server's
    receive channel has nothing left to give but ``http.disconnect`` (uvicorn answers it when the connection drops,
    and when the response is complete): one waiting call per request instead of a poll every 50 ms."""
    receive = request.receive

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            await asyncio.sleep(SPURIOUS_WAKE_S)  # a server that answers at once must not spin the loop

    return gone


def request_context(request: Request, timeout_s: float, quality=None) -> RequestContext:
    """The serving layer's view of this request: id, deadline, batch ids for the access log, disconnects."""
    state = request.scope["state"]
    logged = state.setdefault("texts", []) if request.app.state.mt.settings.server.log_requests_text else None
    return RequestContext(
        request_id=state["request_id"],
        timeout_s=timeout_s,
        batch_ids=state.setdefault("batch_ids", []),  # filled by the scheduler, read by the access log
        disconnected=client_gone(request),
        logged_texts=logged,  # opt-in debugging only: texts go to the access log
        quality=quality,
        client=state.get("api_key", ""),  # set by the middleware (or LibreTranslate's key check)
        cache=request.app.state.mt.cache,  # the translation cache (MT_CACHE_MB), None when off
    )
