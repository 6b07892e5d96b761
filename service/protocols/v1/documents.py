"""/v1/documents: translate whole files (docs/documents.md). Upload (multipart), status with progress, download,
delete; the work is service/serving/document_jobs.py's, in the background at a lower priority than requests.

- ``POST /v1/documents`` (multipart: ``file``, ``target_language``, ``source_language`` (or ``auto``), ``model``):
  202 with the job's status; 415 unsupported type (or content of another format than the name says), 400 corrupt
  or empty file, 413 over MT_MAX_DOCUMENT_BYTES / _CHARS / _PAGES, 422 a language pair nobody serves.
- ``GET /v1/documents/{id}``: status (``queued``, ``translating``, ``done``, ``failed``), ``progress`` 0..1,
  sentences done and total, ``seconds_remaining``, ``error``; 404 unknown or expired.
- ``GET /v1/documents/{id}/result``: the translated file (409 until it is done; a failed job says why).
- ``DELETE /v1/documents/{id}``: 204; the job stops and its files are deleted.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.datastructures import UploadFile

from service.api.errors import ERROR_RESPONSES
from service.api.requests import registry_of
from service.documents import FORMATS, DocumentError
from service.serving.document_jobs import DocumentJobs, JobNotFound, seconds_remaining

PUBLIC = (
    "id", "status", "progress", "filename", "format", "model", "source_language", "target_language",
    "detected_language", "characters", "pages", "sentences_total", "sentences_done", "untranslated_sentences",
    "created", "started", "finished", "error",
)  # fmt: skip


def jobs_of(request: Request) -> DocumentJobs:
    return request.app.state.mt.documents


def status_of(record: dict[str, Any]) -> dict[str, Any]:
    """A job as the API shows it (never its document_key or client)."""
    out = {k: record.get(k) for k in PUBLIC}
    out["seconds_remaining"] = seconds_remaining(record)
    out["result_url"] = f"/v1/documents/{record['id']}/result" if record["status"] == "done" else None
    return out


async def upload_of(request: Request, field: str = "file", max_fields: int = 16) -> tuple[bytes, str, dict[str, str]]:
    """(the file's bytes, its name, the form's text fields) of a multipart upload; DocumentError when absent."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "multipart/form-data":
        raise DocumentError(f"send the file as multipart/form-data with the file in the field {field!r}")
    form = await request.form(max_files=1, max_fields=max_fields)
    upload = form.get(field)
    if not isinstance(upload, UploadFile):
        raise DocumentError(f"no file in the form field {field!r}")
    data = await upload.read()
    fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    return data, upload.filename or "", fields


def result_response(record: dict[str, Any], path) -> Response:
    """The translated file, named after the upload, with its format's media type."""
    suffix = "." + record["filename"].rsplit(".", 1)[-1].lower() if "." in record["filename"] else ""
    media = FORMATS.get(suffix, ("", "application/octet-stream"))[1]
    name = record["filename"]
    disposition = f"attachment; filename*=UTF-8''{quote(name)}"
    return FileResponse(path, media_type=media, headers={"Content-Disposition": disposition})


UPLOAD = {
    "type": "object",
    "required": ["file"],
    "properties": {
        "file": {"type": "string", "format": "binary", "description": "the document; its name's extension is its type"},
        "source_language": {"type": "string", "description": "ISO 639-1, or absent / 'auto' to detect"},
        "target_language": {"type": "string"},
        "model": {"type": "string", "description": "a served model instead of the language pair"},
    },
}


def build_documents_router(app: FastAPI) -> APIRouter:
    router = APIRouter(tags=["documents"])
    errors = {**ERROR_RESPONSES, 400: {"description": "corrupt or empty file"}, 415: {"description": "unsupported"}}

    @router.post(
        "/v1/documents",
        status_code=202,
        responses=errors,
        summary="Upload a document to translate",
        openapi_extra={"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": UPLOAD}}}},
    )
    async def upload(request: Request) -> JSONResponse:
        registry_of(request)  # 503 while loading or draining
        data, filename, fields = await upload_of(request)
        state = request.app.state.mt
        record = await jobs_of(request).submit(
            data, filename, fields.get("source_language") or None, fields.get("target_language") or None,
            fields.get("model") or None, request.scope["state"].get("api_key", ""), state.detector,
        )  # fmt: skip
        request.scope["state"]["model"] = record["model"]
        return JSONResponse(status_of(record), status_code=202, headers={"Location": f"/v1/documents/{record['id']}"})

    @router.get("/v1/documents/{job_id}", responses=errors, summary="A document job's status and progress")
    async def status(job_id: str, request: Request) -> dict[str, Any]:
        return status_of(await jobs_of(request).get(job_id))

    @router.get("/v1/documents/{job_id}/result", responses=errors, summary="The translated document")
    async def result(job_id: str, request: Request) -> Response:
        record, path = await jobs_of(request).result(job_id)
        if record["status"] != "done":
            why = f"failed: {record['error']}" if record["status"] == "failed" else f"is {record['status']}"
            return JSONResponse({"detail": f"document job {job_id} {why}"}, status_code=409)
        return result_response(record, path)

    @router.delete("/v1/documents/{job_id}", status_code=204, responses=errors, summary="Delete a document job")
    async def delete(job_id: str, request: Request) -> Response:
        await jobs_of(request).delete(job_id)
        return Response(status_code=204)

    return router


def install_errors(app: FastAPI) -> None:
    """/v1's form of the document errors: {"detail"} with the error's status (404 for an unknown job)."""

    @app.exception_handler(DocumentError)
    async def document_error(_: Request, exc: DocumentError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(JobNotFound)
    async def not_found(_: Request, exc: JobNotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)
