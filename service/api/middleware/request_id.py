"""The request's id: the client's X-Request-ID when it is safe to log, else a new one; on every response."""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.middleware.replies import header

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestId:
    """Outermost: sets ``scope["state"]["request_id"]`` (the access log, error messages, the serving layer)."""

    def __init__(self, app: ASGIApp, state) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = header(scope, b"x-request-id") or ""
        request_id = given if _SAFE_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        await self.app(scope, receive, with_id)
