"""Admin calls, guarded by MT_ADMIN_KEY (header X-Admin-Key): load another version of a model while serving."""

from __future__ import annotations

import hmac
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from core.bundle import BundleError
from service.models.registry import UnknownModel


class LoadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    version: str | None = Field(None, pattern="^[0-9]{1,9}$", description="version folder; the highest when absent")


class LoadResponse(BaseModel):
    model: str
    version: str
    previous_version: str
    seconds: float = Field(description="verify, load, warm up and switch")


def admin_refusal(request: Request) -> str | None:
    """Why the request may not make an admin call (403), or None: MT_ADMIN_KEY set and sent as X-Admin-Key. Every
    API's admin calls (/v1 here, the v2 model repository extension) ask this."""
    key = request.app.state.mt.settings.repository.admin_key
    given = request.headers.get("x-admin-key", "")
    if not key:
        return "admin calls are off: set MT_ADMIN_KEY to enable them"
    if not hmac.compare_digest(given.encode("utf-8", "replace"), key.encode()):
        return "missing or wrong admin key: send 'X-Admin-Key: <key>'"
    return None


def _denied(request: Request) -> JSONResponse | None:
    refusal = admin_refusal(request)
    return None if refusal is None else JSONResponse({"detail": refusal}, status_code=403)


def build_admin_router() -> APIRouter:
    router = APIRouter()

    @router.post(
        "/v1/models/{name}/load",
        response_model=LoadResponse,
        summary="Load another version of a model (admin)",
        responses={
            403: {"description": "admin key missing or wrong, or admin calls off"},
            404: {"description": "unknown model or version"},
            422: {"description": "the new version was refused (bad files or failed warm-up); the old one serves on"},
        },
    )
    async def load(name: str, request: Request, body: LoadRequest | None = None) -> Any:
        denied = _denied(request)
        if denied is not None:
            return denied
        registry = request.app.state.mt.registry
        if not registry.ready:
            return JSONResponse({"detail": "models are still loading; retry shortly"}, 503, {"Retry-After": "2"})
        started = time.monotonic()
        try:
            new, previous = await registry.load_version(name, body.version if body else None)
        except UnknownModel as exc:
            return JSONResponse({"detail": str(exc)}, status_code=404)
        except BundleError as exc:
            status = 404 if "no version" in str(exc) else 422
            return JSONResponse({"detail": f"refused: {exc}; version {registry.get(name).version} serves on"}, status)
        except RuntimeError as exc:
            return JSONResponse({"detail": f"refused: {exc}; version {registry.get(name).version} serves on"}, 422)
        seconds = round(time.monotonic() - started, 3)
        return {"model": name, "version": new.version, "previous_version": previous, "seconds": seconds}

    return router
