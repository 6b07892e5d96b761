"""The FastAPI application factory: state, lifespan (verify bundles, then load and warm up), routes."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import signal
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline

from core.bundle import BundleError
from core.language import UnknownLanguage, detect, detect_among, unserved
from core.language import detector as language_detector
from service.api import errors, viewer
from service.api.admin import build_admin_router
from service.api.middleware import install as install_middleware
from service.models.announce import VersionAnnouncer
from service.models.registry import LoadedModel, Registry, RunnerWrapper
from service.observability.metrics import Metrics
from service.protocols.deepl.documents import build_deepl_document_router
from service.protocols.deepl.glossaries import build_deepl_glossary_router
from service.protocols.deepl.routes import build_deepl_router
from service.protocols.libretranslate.routes import build_libretranslate_router
from service.protocols.oip.routes import build_v2_router
from service.protocols.v1 import documents, glossaries
from service.protocols.v1.glossaries import build_glossary_router
from service.protocols.v1.routes import build_router
from service.serving.cache import TranslationCache, translation_cache
from service.serving.document_jobs import DocumentJobs
from service.serving.names import warm as warm_names
from service.serving.quality import QualityPolicy
from service.serving.routing import Detector
from service.settings import LanguageSettings, Settings
from service.state import RedisLink, StateStore, open_store
from service.state.rates import LocalRates, SharedRates, key_rates

log = logging.getLogger(__name__)


@dataclass
class AppState:
    settings: Settings
    metrics: Metrics
    registry: Registry
    draining: bool = False
    in_flight: int = 0
    detector: Detector | None = None  # language detection for source_language "auto"
    quality: QualityPolicy | None = None  # language checks and warnings of translations
    reloads: set[asyncio.Task] = field(default_factory=set, repr=False)  # SIGHUP reloads in progress
    load_task: asyncio.Task | None = field(default=None, repr=False)
    # per-API-key rate limits (token buckets): in process, or in Redis across replicas (service/state/rates.py)
    key_rates: LocalRates | SharedRates = field(default_factory=lambda: LocalRates(0.0, 1))
    link: RedisLink | None = None  # Redis shared by the replicas (MT_REDIS_URL), None = one replica
    cache: TranslationCache | None = None  # the translation cache (MT_CACHE_MB), None when off
    announcer: VersionAnnouncer | None = None  # model versions across replicas (with Redis)
    _store: StateStore | None = field(default=None, repr=False)
    documents: DocumentJobs | None = field(default=None, repr=False)  # document jobs (service/serving/document_jobs.py)

    @property
    def store(self) -> StateStore:
        """The state store (service/state/), opened on first use: a server that never stores anything never
        creates MT_STATE_DIR. Raises StateUnavailable when the directory cannot be used."""
        if self._store is None:
            self._store = open_store(self.settings.state, self.link)
        return self._store


def create_app(settings: Settings | None = None, wrap_runner: RunnerWrapper | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics()
    languages = settings.languages
    check = languages.language_mismatch != "off"
    quality = QualityPolicy(
        detect if check else None,
        tuple(languages.detect_languages),
        languages.language_mismatch == "reject",
        unserved=unserved if check else None,
    )
    registry = Registry(settings, metrics, wrap_runner)
    state = AppState(settings, metrics, registry, detector=detect_among, quality=quality)
    shared = settings.state
    if shared.redis_url:
        state.link = RedisLink(shared.redis_url, shared.redis_timeout_s, lambda up: metrics.state_store_up.set(up))
        state.announcer = VersionAnnouncer(state.link, registry)
    access = settings.access
    state.key_rates = key_rates(access.key_rate_per_s, access.key_burst, state.link, shared.replicas)
    state.cache = translation_cache(shared.cache_mb, state.link, metrics)
    chunk = settings.scheduling.max_batch_sentences
    state.documents = DocumentJobs(state, registry, metrics, settings.documents, chunk)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Bundles are hash-checked before the server accepts anything: a bad file stops start-up.
        try:
            state.registry.verify()
        except BundleError as exc:
            log.error("refusing to start: %s", exc)
            raise
        state.load_task = asyncio.create_task(_load(state))
        _reload_on_sighup(state)
        yield
        state.draining = True
        if state.load_task and not state.load_task.done():
            state.load_task.cancel()
        await state.documents.stop()  # unfinished jobs stay in the store; the next start resumes them
        await state.registry.stop()
        if state.announcer is not None:
            await state.announcer.stop()
        if state._store is not None:
            await state._store.close()  # closes the link too (the Redis store owns it then)
        elif state.link is not None:
            await state.link.close()

    # Swagger UI and ReDoc from files installed with fastapi-offline (no CDN): /docs works on a closed network
    app = FastAPIOffline(
        title="mtserve",
        version="0.1.0",
        description="Transformer translation on onnxruntime: translate, embed, attention maps. "
        'Errors are JSON {"detail": ...} saying what to change.',
        lifespan=lifespan,
    )
    app.state.mt = state
    _install_routes(app, settings)
    install_middleware(app, state)
    return app


def _install_routes(app: FastAPI, settings: Settings) -> None:
    """Error handlers, every protocol's routes the settings turn on, the viewer, CORS."""
    errors.install(app)
    documents.install_errors(app)
    app.include_router(build_router(app))
    app.include_router(documents.build_documents_router(app))
    app.include_router(build_glossary_router())
    glossaries.install(app)
    app.include_router(build_admin_router())
    if settings.protocols.deepl_api:  # before v2: its paths are matched first, whatever v2 routes catch
        app.include_router(build_deepl_router(app))
        app.include_router(build_deepl_glossary_router(app))
        app.include_router(build_deepl_document_router(app))
    if settings.protocols.v2_api:
        app.include_router(build_v2_router(app))
    if settings.protocols.libretranslate_api:
        app.include_router(build_libretranslate_router(app))
    viewer.install(app)
    if settings.access.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.access.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type", "X-Request-ID", "X-Request-Timeout"],
            expose_headers=["X-Request-ID", "Retry-After"],
        )


def _reload_on_sighup(state: AppState) -> None:
    """SIGHUP loads every model's pinned or highest version on disk (as the admin call does, one by one)."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGHUP, lambda: state.reloads.add(loop.create_task(state.registry.reload_all())))
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (an embedding app), or no SIGHUP
        log.info("SIGHUP reloads are off in this process")


def _warm_language_detectors(settings: LanguageSettings, models: dict[str, LoadedModel]) -> None:
    """Build the lingua detectors the first requests would use (about 1 s each, built on first use otherwise):
    the language check's set for each model's source language, and /detect's."""
    sets = {tuple(settings.detect_languages)}
    sets |= {tuple(sorted({*settings.detect_languages, m.languages[0]})) for m in models.values()}
    for languages in sets:
        try:
            language_detector(languages)
        except UnknownLanguage as exc:  # a bad MT_DETECT_LANGUAGES code: /detect says so per request
            log.warning("language detector not built: %s", exc)


def _warm(settings: LanguageSettings, models: dict[str, LoadedModel]) -> None:
    """What the first requests would otherwise wait for: language detectors, and what names are found with
    (service/serving/names.py)."""
    _warm_language_detectors(settings, models)
    warm_names({m.languages[0] for m in models.values()})


async def _load(state: AppState) -> None:
    try:
        await state.registry.load(functools.partial(_warm, state.settings.languages))
        # What startup built (modules, routes, schemas, sessions, detectors) lives as long as the process: out of the
        # cyclic collector's sight, a full collection walks only what requests made (it walked it all and cost the
        # event loop over a quarter of its CPU at 64 clients, docs/engine-speed-log.md)
        gc.freeze()
        state.documents.start()  # resumes the jobs a previous run left unfinished
        if state.announcer is not None:
            state.announcer.start()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the process exits non-zero (see service.__main__)
        state.registry.failed = f"model loading failed: {exc}"
        log.exception("model loading failed")
