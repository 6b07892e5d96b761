"""The HTTP stack alone, under ``python -m service``'s own uvicorn set-up: what a request costs before any of our
serving code runs. bench/profile_server.py ``--floors`` runs these beside the real server, with the same clients
and requests, so the server's CPU per request outside its engine thread can be read against them.

    python -m bench.http_floor asgi|fastapi     # MT_HOST, MT_PORT and the connection settings from the environment

- ``asgi``: one bare ASGI callable that reads the body and answers a fixed JSON translation: uvicorn, our guarded
  h11 protocol (service/api/http_protocol.py) and the socket work, nothing else.
- ``fastapi``: a FastAPI app with one ``POST /v1/translate`` route that validates the body against a pydantic model
  of the same fields as the real request and answers the same fixed translation through a response model: the
  floor of any FastAPI service, before middleware, tokenization, scheduling and the engine.

Both answer ``/readyz`` (200) and ``/v1/models`` (no models), so bench/harness.py's ServerProcess can start them.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from service.__main__ import accept_budget, http_limits, raise_fd_limit
from service.api.http_protocol import guarded_protocol
from service.settings import Settings

ANSWER = {"translations": [{"text": "A man rides a bicycle.", "score": -1.0, "model": "floor", "warnings": []}]}
_BODIES = {b"/readyz": json.dumps({"status": "ready"}).encode(), b"/v1/models": json.dumps({"models": []}).encode()}
_TRANSLATION = json.dumps(ANSWER).encode()


async def bare_app(scope: dict, receive: Any, send: Any) -> None:
    """The ``asgi`` floor: read the whole body, answer the fixed translation (or /readyz, /v1/models)."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    body = _BODIES.get(scope["path"].encode(), _TRANSLATION)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class FloorRequest(BaseModel):
    texts: list[str]
    model: str | None = None
    beam_size: int | None = None
    timeout_s: float | None = None


class FloorTranslation(BaseModel):
    text: str
    score: float
    model: str
    warnings: list[dict[str, str]]


class FloorResponse(BaseModel):
    translations: list[FloorTranslation]


def fastapi_app() -> FastAPI:
    """The ``fastapi`` floor."""
    app = FastAPI()

    @app.get("/readyz")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    @app.get("/v1/models")
    async def models() -> dict[str, list]:
        return {"models": []}

    @app.post("/v1/translate", response_model=FloorResponse)
    async def translate(body: FloorRequest) -> Any:
        return {"translations": [{**ANSWER["translations"][0]} for _ in body.texts]}

    return app


def main(argv: list[str] | None = None) -> int:
    kind = (argv if argv is not None else sys.argv[1:])[:1]
    if kind not in (["asgi"], ["fastapi"]):
        print("usage: python -m bench.http_floor asgi|fastapi", file=sys.stderr)
        return 2
    settings = Settings()
    max_connections, backlog = accept_budget(settings.connections.max_connections, raise_fd_limit())
    config = uvicorn.Config(
        bare_app if kind == ["asgi"] else fastapi_app(),
        http=guarded_protocol(http_limits(settings.connections, max_connections)),
        backlog=backlog,
        host=settings.server.host,
        port=settings.server.port,
        log_config=None,
        log_level="warning",
        timeout_keep_alive=settings.connections.keep_alive_s,
        access_log=False,
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
