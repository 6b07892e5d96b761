"""What the pieces of middleware do alike at the ASGI level: read a header, answer in JSON, read a refused body."""

from __future__ import annotations

import json

from starlette.types import Receive, Scope, Send

from service.api.middleware.paths import error_body


def header(scope: Scope, name: bytes) -> str | None:
    """The value of request header ``name`` (lower case; the last one when it is sent twice), or None."""
    found = None
    for key, value in scope["headers"]:
        if key.lower() == name:
            found = value
    return None if found is None else found.decode("latin-1")


async def send_error(
    send: Send, scope: Scope, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """Answer ``status`` with ``message`` in the form of the path's protocol."""
    payload = json.dumps(error_body(scope["path"], message, status)).encode()
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


async def discard_body(receive: Receive) -> None:
    """Read the request body to its end (keep-alive needs it consumed); nothing is parsed."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
