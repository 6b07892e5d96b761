"""The attention viewer: ``/`` serves the page, ``/static`` its script and style, ``/favicon.ico`` its icon (all in
service/static)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"


def install(app: FastAPI) -> None:
    """Add the page at ``/`` and its assets under ``/static`` (counted as endpoint "other" in the metrics)."""

    @app.get("/", include_in_schema=False)
    async def viewer() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers={"Cache-Control": "no-cache"})

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:  # browsers ask for it whatever the page says: a 404 in every log otherwise
        return FileResponse(STATIC_DIR / "favicon.ico", media_type="image/x-icon")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
