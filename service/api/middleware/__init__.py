"""ASGI middleware, one concern a piece, outermost first:

1. ``RequestId`` (request_id.py): the request's id, from X-Request-ID or new, on every response;
2. ``Observe`` (observe.py): requests in flight (draining waits for them), request metrics, the access log;
3. ``Auth`` (access.py): an API key where MT_API_KEYS asks for one (401), its label for the pieces below;
4. ``BodyCap`` (body.py): the body limit, by Content-Length up front and as the body streams in (413);
5. ``KeyRate`` (access.py): a key's rate limit (429 with Retry-After, before the body is read);
6. ``Shed`` (shed.py): while every model's queue is full, work requests are refused (429) before their body is
   parsed, validated or tokenized.

A piece that answers sends JSON in the form of the path's protocol (paths.py ``error_body``).
"""

from __future__ import annotations

from starlette.applications import Starlette

from service.api.middleware.access import Auth, KeyRate
from service.api.middleware.body import BodyCap
from service.api.middleware.observe import Observe
from service.api.middleware.request_id import RequestId
from service.api.middleware.shed import Shed


def install(app: Starlette, state) -> None:
    """Add the pieces, each around the ones added before it: the last added is the outermost."""
    for piece in (Shed, KeyRate, BodyCap, Auth, Observe, RequestId):
        app.add_middleware(piece, state=state)
