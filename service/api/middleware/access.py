"""API keys at the door: a key where MT_API_KEYS asks for one (401; the DeepL API's 403), and each key's rate limit
(429)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from service.access.keys import match_key
from service.api.middleware.paths import is_deepl, is_protected, is_rate_limited
from service.api.middleware.replies import discard_body, header, send_error

MISSING_KEY = "missing or invalid API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
DEEPL_MISSING_KEY = "Authorization failure: missing or invalid key; send 'Authorization: DeepL-Auth-Key <key>'"
# DeepL stopped taking keys in the query string or the body (January 2026): so do we, saying what to send instead
DEEPL_LEGACY_KEY = (
    "Legacy authentication with auth_key in the query string is not supported; send 'Authorization: DeepL-Auth-Key "
    "<key>'"
)
SCHEMES = ("bearer ", "deepl-auth-key ")  # Authorization schemes that carry a key (DeepL clients send the second)


def offered_key(scope: Scope) -> str:
    """The key a request offers: 'Authorization: Bearer <key>' or 'DeepL-Auth-Key <key>', else X-API-Key, else ""."""
    auth = header(scope, b"authorization") or ""
    for scheme in SCHEMES:
        if auth.lower().startswith(scheme):
            return auth[len(scheme) :].strip()
    return header(scope, b"x-api-key") or ""


class Auth:
    """With MT_API_KEYS set, /v1/*, /v2/* and the operations endpoints need a key unless listed in MT_OPEN_PATHS;
    the key's label becomes ``scope["state"]["api_key"]``: whose work it is (limits, fair turns, metrics, the access
    log)."""

    def __init__(self, app: ASGIApp, state) -> None:
        self.app, self.settings = app, state.settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        authorized, label = self._authorized(scope)
        if not authorized and is_deepl(scope["path"]):
            legacy = b"auth_key=" in scope.get("query_string", b"")
            await send_error(send, scope, 403, DEEPL_LEGACY_KEY if legacy else DEEPL_MISSING_KEY)
            return
        if not authorized:
            await send_error(send, scope, 401, MISSING_KEY, [(b"www-authenticate", b"Bearer")])
            return
        if label:
            scope["state"]["api_key"] = label
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> tuple[bool, str]:
        """(whether the request may pass, the label of its API key or "")."""
        s, path = self.settings, scope["path"]
        if not s.access.api_keys or path in s.access.open_paths or not is_protected(path):
            return True, ""
        if scope["method"] == "OPTIONS" and s.access.cors_origins and header(scope, b"access-control-request-method"):
            return True, ""  # a CORS preflight: browsers send it without credentials
        label = match_key(offered_key(scope), s.access.api_keys)
        return label is not None, label or ""


class KeyRate:
    """A key over its rate limit (MT_KEY_RATE_PER_S, MT_KEY_BURST) is refused its work requests and document uploads
    before anything is read; with Redis the limit holds across replicas (service/state/rates.py)."""

    def __init__(self, app: ASGIApp, state) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        label = scope.get("state", {}).get("api_key")
        if scope["type"] != "http" or not label or scope["method"] != "POST" or not is_rate_limited(scope["path"]):
            await self.app(scope, receive, send)
            return
        limited = await self.state.key_rates.check(label)
        if limited is None:
            await self.app(scope, receive, send)
            return
        await discard_body(receive)
        self.state.metrics.key_rejections.labels(label, "rate_limit").inc()
        await send_error(send, scope, 429, str(limited), [(b"retry-after", str(limited.retry_after).encode())])
