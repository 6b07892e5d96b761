"""The body limit (MT_MAX_BODY_BYTES): a declared Content-Length over it is refused before anything is read, and a
body that streams past it (chunked, or a length that lied) stops the request where it gets there (413)."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.middleware.replies import header, send_error


class BodyTooLarge(HTTPException):
    """Raised while the body streams in; an HTTPException so body parsing re-raises it rather than answering 400."""

    def __init__(self) -> None:
        super().__init__(413, "request body too large")


def too_large(limit: int, length: str | None = None) -> str:
    """What a 413 says: the declared ``length`` when there was one, the limit, what to change."""
    size = f" of {length} bytes" if length is not None else ""
    return f"request body{size} exceeds the limit of {limit} bytes; send fewer or shorter texts"


class BodyCap:
    def __init__(self, app: ASGIApp, state) -> None:
        self.app, self.limit = app, state.settings.limits.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await send_error(send, scope, 413, too_large(self.limit, length))
            return
        try:
            await self.app(scope, self._limited(receive), send)
        except BodyTooLarge:
            await send_error(send, scope, 413, too_large(self.limit))

    def _limited(self, receive: Receive) -> Receive:
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge
            return message

        return limited
