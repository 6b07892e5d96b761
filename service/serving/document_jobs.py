"""Document jobs: accepted uploads translated in the background, kept in the state store, resumed after a restart.

A job is a record in the state store (namespace ``documents``: status, progress, languages, model, timings) and
two files under ``store.files_dir/documents/<id>/`` (the upload, then the result). Nothing lives only in memory:

- ``submit`` reads the file (DocumentError: 400, 413, 415), checks the limits, routes it to a model, writes the
  upload and the record (status ``queued``), and wakes the runner;
- the runner (one asyncio task per process) claims queued and unfinished jobs by creating a short-lived lease record
  (namespace ``document_leases``, renewed while the job runs), so each job runs in one process at a time, at most
  MT_DOCUMENT_WORKERS at once; the translation goes through the model's scheduler at background priority
  (service/serving/documents.py), the record's progress updated after every chunk;
- a finished or failed job keeps its record and files MT_DOCUMENT_RETENTION_S (the record expires in the store, the
  runner deletes files whose record is gone);
- on shutdown running jobs are stopped and their leases released: the next start (or another process sharing the
  store) resumes them from the upload. A process that died without releasing its leases is taken over when they
  expire (LEASE_S). A job that cannot be resumed (its model is no longer served) fails with a message saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from engine.decoding import TranslateOptions
from service.documents import DocumentError, DocumentTooLarge, format_of, open_document
from service.documents.inline import plain, read
from service.models.registry import Registry, UnknownModel
from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BACKGROUND
from service.scheduling.errors import EngineRestarted, ShuttingDown
from service.serving.context import RequestContext
from service.serving.directions import routed
from service.serving.documents import plan_units, translate_units
from service.serving.routing import Detector, route
from service.serving.terms import Terms
from service.settings import DocumentSettings
from service.state import StateStore, StateUnavailable

log = logging.getLogger(__name__)

NAMESPACE, LEASES = "documents", "document_leases"
LEASE_S = 10.0  # a lease not renewed for this long is taken over (its process died)
POLL_S = LEASE_S / 2  # how often the runner looks for jobs it did not hear of (another process, an expired lease)
UNFINISHED_TTL_S = 7 * 86400.0  # a queued or running job's record; a finished one keeps MT_DOCUMENT_RETENTION_S
ACTIVE, ENDED = ("queued", "translating"), ("done", "failed")
ENGINE_RESTARTS = 3  # a job whose work an engine restart lost is translated again from its start this many times
OPTIONS = TranslateOptions.request()  # /v1's default search: the model's beam (core/search.py DEFAULT_BEAM if none)


class JobNotFound(LookupError):
    pass


class DocumentJobs:
    def __init__(self, state: Any, registry: Registry, metrics: Metrics, settings: DocumentSettings, chunk: int):
        """``state``: whatever has the ``store`` (AppState: opened lazily); ``chunk``: sentences queued at once."""
        self._state, self.registry, self.metrics, self.settings = state, registry, metrics, settings
        self.chunk = max(1, chunk)
        self.instance = uuid.uuid4().hex
        self.running: dict[str, asyncio.Task] = {}
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.Task | None = None
        self._last_sweep = 0.0

    @property
    def store(self) -> StateStore:
        return self._state.store

    def folder(self, job_id: str) -> Path:
        return self.store.files_dir / NAMESPACE / job_id

    # --- what the APIs call ---------------------------------------------------------------------------------
    async def submit(
        self,
        data: bytes,
        filename: str,
        source_language: str | None,
        target_language: str | None,
        model: str | None = None,
        client: str = "",
        detect: Detector | None = None,
        glossary: dict[str, Any] | None = None,
        charge: Callable[[int], Awaitable[None]] | None = None,
    ) -> dict[str, Any]:
        """Accept an upload: the job's record (status queued). DocumentError, UnservedPair refuse it.

        ``glossary``: a stored glossary's record (service/serving/glossaries.py), copied into the job so a later
        change or deletion of it does not change the job; TermsError when its pair is not the chosen model's.
        ``charge``: awaited with the document's characters before anything is stored (a quota that refuses raises,
        and nothing is accepted)."""
        s = self.settings
        fmt = format_of(filename)
        if len(data) > s.max_document_bytes:
            raise DocumentTooLarge(f"the file has {len(data)} bytes; the limit is {s.max_document_bytes} bytes")
        document = await asyncio.to_thread(open_document, data, filename)
        if document.characters > s.max_document_chars:
            message = (
                f"the document holds {document.characters} characters of text; the limit is {s.max_document_chars}"
            )
            raise DocumentTooLarge(message)
        if document.pages > s.max_document_pages:
            raise DocumentTooLarge(f"the presentation has {document.pages} slides; the limit is {s.max_document_pages}")
        sample = " ".join(plain(read(u)) for u in document.units[:20])[:2000] if fmt != "html" else ""
        models, detected = route(self.registry, [sample or "."], model, source_language, target_language, detect)
        chosen = models[0]
        terms = None
        if glossary is not None:
            terms = {
                "glossary_id": glossary["glossary_id"],
                "entries": glossary["entries"],
                "pair": [glossary["source_language"], glossary["target_language"]],
            }
            _terms(terms).check_pair(chosen.name, chosen.languages)
        if charge is not None:
            await charge(document.characters)
        job_id = uuid.uuid4().hex
        now = time.time()
        record = {
            "id": job_id,
            "status": "queued",
            "filename": Path(filename).name or f"document.{fmt}",
            "format": fmt,
            "model": chosen.name,
            "source_language": chosen.languages[0],
            "target_language": chosen.languages[1],
            "detected_language": detected[0],
            "characters": document.characters,
            "pages": document.pages,
            "units": len(document.units),
            "sentences_total": None,
            "sentences_done": 0,
            "untranslated_sentences": 0,
            "progress": 0.0,
            "created": now,
            "started": None,
            "finished": None,
            "error": None,
            "glossary": terms,
            "document_key": secrets.token_hex(16),
            "client": client,
        }
        folder = self.folder(job_id)
        await asyncio.to_thread(_write, folder / "source", data)
        await self.store.put(NAMESPACE, job_id, record, UNFINISHED_TTL_S)
        if self._wake is not None:
            self._wake.set()
        return record

    async def get(self, job_id: str) -> dict[str, Any]:
        record = await self.store.get(NAMESPACE, job_id) if _valid_id(job_id) else None
        if record is None:
            raise JobNotFound(f"no document job {job_id!r} (never created, deleted, or expired after retention)")
        return record

    async def result(self, job_id: str) -> tuple[dict[str, Any], Path]:
        record = await self.get(job_id)
        return record, self.folder(job_id) / "result"

    async def delete(self, job_id: str) -> None:
        await self.get(job_id)
        await self.store.delete(NAMESPACE, job_id)
        task = self.running.get(job_id)
        if task is not None:
            task.cancel()
        await asyncio.to_thread(shutil.rmtree, self.folder(job_id), True)

    async def wait(self, job_id: str, timeout_s: float) -> dict[str, Any]:
        """The record once the job is done or failed, or as it is after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            record = await self.get(job_id)
            if record["status"] in ENDED or time.monotonic() >= deadline:
                return record
            await asyncio.sleep(0.1)

    # --- the runner -----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop().create_task(self._run_loop(), name="document-jobs")

    async def stop(self) -> None:
        """Stop taking jobs and stop the running ones (left unfinished, leases released: the next start resumes)."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_loop(self) -> None:
        while True:
            try:
                await self._claim()
                if time.monotonic() - self._last_sweep > 60:
                    self._last_sweep = time.monotonic()
                    await self._sweep()
            except StateUnavailable as exc:
                log.warning("document jobs wait for the state store: %s", exc)
            except Exception:
                log.exception("document job runner error")
            assert self._wake is not None
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)

    async def _claim(self) -> None:
        free = self.settings.document_workers - len(self.running)
        if free <= 0:
            return
        records = await self.store.records(NAMESPACE)
        waiting = sorted((r for k, r in records.items() if r["status"] in ACTIVE and k not in self.running),
                         key=lambda r: r["created"])  # fmt: skip
        for record in waiting[:free]:
            if await self.store.create(LEASES, record["id"], {"owner": self.instance}, LEASE_S):
                task = asyncio.get_running_loop().create_task(self._job(record["id"]), name=f"document-{record['id']}")
                self.running[record["id"]] = task

    async def _sweep(self) -> None:
        """Delete the files of jobs whose record is gone (deleted, or expired after retention)."""
        root = self.store.files_dir / NAMESPACE
        folders = await asyncio.to_thread(lambda: [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else [])
        for folder in folders:
            if folder.name not in self.running and await self.store.get(NAMESPACE, folder.name) is None:
                await asyncio.to_thread(shutil.rmtree, folder, True)

    async def _renew(self, job_id: str) -> None:
        while True:
            await asyncio.sleep(LEASE_S / 3)
            with contextlib.suppress(StateUnavailable):
                await self.store.put(LEASES, job_id, {"owner": self.instance}, LEASE_S)

    async def _update(self, record: dict[str, Any], ttl_s: float = UNFINISHED_TTL_S) -> bool:
        """Store the record unless the job was deleted meanwhile (False then)."""
        if await self.store.get(NAMESPACE, record["id"]) is None:
            return False
        await self.store.put(NAMESPACE, record["id"], record, ttl_s)
        return True

    async def _translate(self, job_id: str, model, plans, ctx: RequestContext, progress) -> Any:
        """``translate_units``; when an engine restart lost the job's work (EngineRestarted: its worker process died,
        service/execution/remote.py), the job starts again from its first sentence after the Retry-After the engine
        gave (ENGINE_RESTARTS times at most), instead of failing."""
        for attempt in range(ENGINE_RESTARTS + 1):
            try:
                return await translate_units(model, plans, OPTIONS, ctx, self.chunk, progress)
            except EngineRestarted as exc:
                if attempt == ENGINE_RESTARTS:
                    raise
                log.warning("document job %s: the engine restarted under it; it starts again", job_id)
                await progress(0, 0)
                await asyncio.sleep(exc.retry_after)
        raise AssertionError("unreachable")

    async def _job(self, job_id: str) -> None:
        renew = asyncio.get_running_loop().create_task(self._renew(job_id))
        remaining = 0
        record: dict[str, Any] | None = None
        try:
            record = await self.store.get(NAMESPACE, job_id)
            if record is None or record["status"] in ENDED:
                return
            data = await asyncio.to_thread((self.folder(job_id) / "source").read_bytes)
            document = await asyncio.to_thread(open_document, data, record["filename"])
            model = routed(self.registry, record["model"], record["source_language"], record["target_language"])
            plans = await asyncio.to_thread(plan_units, model, document.units)
            total = sum(len(p.sentences) for p in plans)
            record.update(status="translating", started=time.time(), sentences_total=total, sentences_done=0)
            if not await self._update(record):
                return
            remaining = total
            self.metrics.document_jobs_active.inc()
            self.metrics.document_sentences_remaining.inc(total)

            async def progress(done: int, _: int) -> None:
                nonlocal remaining
                step = done - record["sentences_done"]
                remaining -= step
                self.metrics.document_sentences_remaining.dec(step)
                self.metrics.document_sentences.labels(record["format"]).inc(max(step, 0))  # 0: started again
                record.update(sentences_done=done, progress=round(done / total, 4) if total else 1.0)
                if not await self._update(record):
                    raise asyncio.CancelledError  # deleted while it ran

            ctx = RequestContext(request_id=f"document-{job_id}", timeout_s=3600.0, client=record["client"],
                                 priority=BACKGROUND)  # fmt: skip
            if record.get("glossary"):
                ctx.terms = _terms(record["glossary"])
            translated = await self._translate(job_id, model, plans, ctx, progress)
            out = await asyncio.to_thread(document.render, translated.units)
            await asyncio.to_thread(_write, self.folder(job_id) / "result", out)
            record.update(
                status="done", progress=1.0, finished=time.time(), untranslated_sentences=translated.untranslated,
                version=translated.model.version, result_bytes=len(out),
            )  # fmt: skip
            await self._update(record, self.settings.document_retention_s)
            self.metrics.document_jobs.labels(record["format"], "done").inc()
        except (asyncio.CancelledError, ShuttingDown):
            pass  # stopped (shutdown) or deleted: an unfinished job stays queued for the next start
        except (DocumentError, UnknownModel, Exception) as exc:  # noqa: BLE001 (a job's failure is reported, never raised)
            message = (
                str(exc) if isinstance(exc, DocumentError | UnknownModel) else f"internal error ({type(exc).__name__})"
            )
            if not isinstance(exc, DocumentError | UnknownModel):
                log.exception("document job %s failed", job_id)
            if record is not None:
                record.update(status="failed", error=message, finished=time.time())
                with contextlib.suppress(Exception):
                    await self._update(record, self.settings.document_retention_s)
                self.metrics.document_jobs.labels(record["format"], "failed").inc()
        finally:
            renew.cancel()
            if remaining:
                self.metrics.document_sentences_remaining.dec(remaining)
            if record is not None and record.get("started"):
                self.metrics.document_jobs_active.dec()
            with contextlib.suppress(Exception):
                await self.store.delete(LEASES, job_id)
            self.running.pop(job_id, None)
            if self._wake is not None:
                self._wake.set()


def _write(path: Path, data: bytes) -> None:
    """Write whole or not at all (a temporary file renamed over the target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(path)


def _terms(glossary: dict[str, Any]) -> Terms:
    """The terms of a job's copied glossary."""
    return Terms({s: t for s, t in glossary["entries"]}, [], tuple(glossary["pair"]), glossary["glossary_id"])


def _valid_id(job_id: str) -> bool:
    return len(job_id) == 32 and all(c in "0123456789abcdef" for c in job_id)


def seconds_remaining(record: dict[str, Any]) -> int | None:
    """An estimate from the pace so far (None before the first chunk)."""
    done, total, started = record.get("sentences_done") or 0, record.get("sentences_total"), record.get("started")
    if record["status"] in ENDED:
        return 0
    if not done or not total or not started:
        return None
    return max(1, round((time.time() - started) / done * (total - done)))
