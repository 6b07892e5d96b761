"""The body limit (MT_MAX_BODY_BYTES): a declared Content-Length over it is refused before anything is read, and a
body that streams past it (chunked, or a length that lied) stops the request where it gets there (413). Document
uploads (``DOCUMENT_UPLOAD_PATHS``) have MT_MAX_DOCUMENT_BYTES (and room for the form) instead."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.middleware.paths import DOCUMENT_UPLOAD_PATHS
from service.api.middleware.replies import header, send_error


class BodyTooLarge(HTTPException):
    """Raised while the body streams in; an HTTPException so body parsing re-raises it rather than answering 400."""

    def __init__(self) -> None:
        super().__init__(413, "request body too large")


def too_large(limit: int, length: str | None = None) -> str:
    """What a 413 says: the declared ``length`` when there was one, the limit, what to change."""
    size = f" of {length} bytes" if length is not None else ""
    return f"request body{size} exceeds the limit of {limit} bytes; send fewer or shorter texts"


MULTIPART_ROOM = 64 << 10  # an upload's body: the file and its form fields


def body_limit(settings, path: str) -> int:
    """The body limit of a request to ``path``."""
    if path in DOCUMENT_UPLOAD_PATHS:
        return settings.documents.max_document_bytes + MULTIPART_ROOM
    return settings.limits.max_body_bytes


class BodyCap:
    def __init__(self, app: ASGIApp, state) -> None:
        self.app, self.settings = app, state.settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(self.settings, scope["path"])
        length = header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await send_error(send, scope, 413, too_large(limit, length))
            return
        try:
            await self.app(scope, self._limited(receive, limit), send)
        except BodyTooLarge:
            await send_error(send, scope, 413, too_large(limit))

    def _limited(self, receive: Receive, limit: int) -> Receive:
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge
            return message

        return limited
