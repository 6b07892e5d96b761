"""Load shedding: while no model's queue would take a work request (or, for an API key, the key's share of every
queue is full), it is refused with 429 and Retry-After before its body is parsed, validated or tokenized, so
refusing costs little and leaves the CPU to the accepted work."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.middleware.paths import is_work_path
from service.api.middleware.replies import discard_body, send_error
from service.scheduling.errors import KeyQueueFull


class Shed:
    def __init__(self, app: ASGIApp, state) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = None
        if scope["type"] == "http" and scope["method"] == "POST" and is_work_path(scope["path"]):
            registry = self.state.registry
            if not self.state.draining and registry.ready:
                refusal = registry.refusal(scope["state"].get("api_key", ""))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        model, full = refusal
        await discard_body(receive)
        scope["state"]["model"] = model
        label = scope["state"].get("api_key")
        if label:
            reason = "key_queue_full" if isinstance(full, KeyQueueFull) else "queue_full"
            self.state.metrics.key_rejections.labels(label, reason).inc()
        await send_error(send, scope, 429, str(full), [(b"retry-after", str(full.retry_after).encode())])
