"""Loaded models: bundle verification at start-up, engines and their schedulers, warm-up, readiness."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.bundle import Bundle, BundleError, discover, load_bundle, versions_of
from core.directions import DirectionError, directions_info, directions_of, split_name, tag_ids
from engine import Engine
from service.access.keys import key_queue_cap
from service.execution.engine_build import EngineSpec, build_engine, choose_variant  # noqa: F401 (choose_variant: re-exported)
from service.execution.remote import ProcessEngineWorker
from service.execution.work import EmbedOptions
from service.execution.worker import EngineWorker, RunnerWrapper
from service.observability.inference_stats import InferenceStatistics
from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BatchLimits, LiveLimits
from service.scheduling.continuous import continuous_scheduler
from service.scheduling.dynamic import dynamic_scheduler
from service.scheduling.errors import QueueFull
from service.scheduling.scheduler import Scheduler
from service.settings import Settings, parse_pairs

log = logging.getLogger(__name__)


class UnknownModel(LookupError):
    pass


def answering_models(served: dict[str, set[str]], default: str, chosen: dict[str, str]) -> dict[tuple[str, str], str]:
    """(source, target) -> the model that answers it, from each model's directions ("de-en", ...): the one
    ``chosen`` names (MT_DIRECTION_MODELS) while it is loaded, else the default model, else the first by name."""
    found = {split_name(d): name for d, name in chosen.items() if d in served.get(name, ())}
    for name in sorted(served, key=lambda n: (n != default, n)):
        for direction in served[name]:
            found.setdefault(split_name(direction), name)
    return found


def directions_by_model(bundles: dict[str, Bundle]) -> dict[str, set[str]]:
    """Each model's directions by name ("de-en", ...; core/directions.py)."""
    return {name: set(directions_of(bundle.manifest)) for name, bundle in bundles.items()}


def check_direction_models(chosen: dict[str, str], served: dict[str, set[str]]) -> None:
    """BundleError unless each direction MT_DIRECTION_MODELS names is one its model serves."""
    for direction, name in chosen.items():
        if name not in served:
            raise BundleError(f"MT_DIRECTION_MODELS: {direction}={name}: no model {name!r} (have {sorted(served)})")
        if direction not in served[name]:
            listed = ", ".join(sorted(served[name]))
            raise BundleError(f"MT_DIRECTION_MODELS: model {name} does not serve {direction} (it serves {listed})")


DIRECTION_MODELS_FILE = "direction-models"  # in the model repository: a release's choice, as MT_DIRECTION_MODELS


def repository_direction_models(root: Path) -> dict[str, str]:
    """The model repository's own choice of which model answers a shared direction (``<root>/direction-models``,
    ``de-en=multi,zh-en=zh-en``, written by scripts/release_multi.sh), used when MT_DIRECTION_MODELS is empty; a
    named model that is not served (MT_MODELS loads fewer) leaves its directions to the usual order."""
    path = root / DIRECTION_MODELS_FILE
    if not path.is_file():
        return {}
    try:
        return parse_pairs(path.read_text(encoding="utf-8").strip())
    except ValueError as exc:
        raise BundleError(f"{path}: {exc}") from exc


@dataclass
class LoadedModel:
    name: str
    bundle: Bundle
    worker: EngineWorker | ProcessEngineWorker  # the engine, supervised: rebuilt after a fault
    scheduler: Scheduler
    variant: str
    max_source_subwords: int  # per text, EOS excluded: the model's limit and MT_MAX_TOKENS_PER_TEXT, the lower
    replaced_by: LoadedModel | None = None  # set when a newer version took over; late work follows it
    unloaded: bool = False  # taken out of service (Registry.unload); late work is told so

    @property
    def engine(self) -> Engine:
        """The current engine (a new one after a restart; same tokenizer and limits)."""
        return self.worker.engine  # type: ignore[return-value]

    @property
    def version(self) -> str:
        return self.bundle.version

    @property
    def languages(self) -> tuple[str, str]:
        return self.bundle.manifest["source_language"], self.bundle.manifest["target_language"]

    @property
    def confidence_map(self) -> dict[str, Any] | None:
        """The fitted confidence map of its own pair (manifest ``confidence``; export/confidence.py), or None."""
        return self.bundle.manifest.get("confidence")

    # the bundle's own pair, its first direction (core/directions.py); service/serving/directions.py's Routed
    # serves the others of a multilingual bundle on the same engine and scheduler
    @property
    def pivot(self) -> str | None:
        return None  # a model's own pair is never pivoted

    @property
    def route_key(self) -> str:
        """What texts of one request are grouped by: a model in one direction."""
        return self.name

    @property
    def source_prefix(self) -> list[int]:
        """The ids put before each source's own (the tag of a multilingual bundle's own pair; none for others)."""
        direction = next(iter(directions_of(self.bundle.manifest).values()))
        return tag_ids(self.engine.tokenizer.encode, self.engine.tokenizer.sp.piece_to_id, direction.tag)

    def info(self) -> dict[str, Any]:
        m = self.bundle.manifest
        variant = m["variants"][self.variant]
        return {
            "name": self.name,
            "version": self.bundle.version,
            "source_language": m["source_language"],
            "target_language": m["target_language"],
            "parameters": m["parameters"],
            "source": self.bundle.source,
            "variant": self.variant,
            "variants": self.bundle.variants,
            "bleu": variant.get("bleu"),
            "providers": self.engine.providers,
            "threads": self.engine.threads,
            "search": "device" if self.engine.device_runner is not None else "host",
            "fused_step": self.engine.fused_step,  # "fused", "off", or why not
            "max_source_tokens": self.engine.max_source_tokens,  # the model's positions, EOS included
            "max_source_subwords": self.max_source_subwords,  # what requests may send: one limit everywhere
            "directions": directions_info(m),
            "layers": {"encoder": m["model"]["n_encoder_layers"], "decoder": m["model"]["n_decoder_layers"]},
            "heads": m["model"]["n_heads"],
            "dimension": m["model"]["d_model"],
            "scheduler": self.scheduler.mode,  # continuous falls back to dynamic for older bundles
            "decoding": dict(self.engine.decoding),  # defaults of the options a request leaves out
        }


class Registry:
    """The models being served, one version each, with their own scheduler, queue and metrics label.

    ``load_version`` swaps a model's version while serving: verify the new bundle's hashes, create its engine,
    warm it up, start its scheduler, switch new requests to it, then let the old scheduler finish what it
    accepted before it is dropped. Work that reaches the old scheduler after the switch follows
    ``LoadedModel.replaced_by`` to the new one. A bundle that fails any step is refused and the old one serves on.
    ``unload`` takes a model out of service the same way (what it accepted finishes); ``load_model`` brings it back,
    or starts a model of the repository that was not loaded, or swaps the version of a loaded one.
    """

    def __init__(self, settings: Settings, metrics: Metrics, wrap_runner: RunnerWrapper | None = None) -> None:
        self.settings, self.metrics, self.wrap_runner = settings, metrics, wrap_runner
        self.bundles: dict[str, Bundle] = {}
        self.models: dict[str, LoadedModel] = {}
        self.ready = False
        self.failed: str | None = None
        self._swap_lock = asyncio.Lock()
        self.reasons: dict[str, str] = {}  # why each model serves the version it serves (/v1/models, logs)
        self.direction_models: dict[str, str] = {}  # direction -> model, for directions several models serve
        self.unloaded: dict[str, str] = {}  # models taken out of service -> the version they served
        self.stats = InferenceStatistics()  # the v2 statistics extension: fed by requests and the schedulers
        # told (name, version, reason) after each swap: service/models/announce.py tells the other replicas
        self.on_swap: Callable[[str, str, str], None] | None = None

    def verify(self) -> None:
        """Find and hash-check every bundle to load; raises BundleError naming the bad file."""
        r = self.settings.repository
        found = discover(r.model_repository)
        wanted = r.models or sorted(found)
        if not wanted:
            raise BundleError(f"{r.model_repository}: no model bundles found (expected <name>/<version>/)")
        for name in wanted:
            if name not in found:
                raise BundleError(f"{r.model_repository}/{name}: no bundle (have {sorted(found)})")
            pinned = r.model_versions.get(name)
            self.bundles[name] = load_bundle(self._version_path(name, pinned), verify=True)
            self.reasons[name] = "pinned by MT_MODEL_VERSIONS" if pinned else "the highest version on disk"
            available = versions_of(r.model_repository, name)
            log.info(
                "model %s: serving version %s (%s; on disk: %s)",
                name,
                pinned or available[-1],
                self.reasons[name],
                ", ".join(available),
            )
        if r.default_model not in self.bundles:
            raise BundleError(f"default model {r.default_model!r} is not among {sorted(self.bundles)}")
        check_direction_models(r.direction_models, directions_by_model(self.bundles))
        self.direction_models = r.direction_models or repository_direction_models(r.model_repository)
        if self.direction_models:
            source = "MT_DIRECTION_MODELS" if r.direction_models else f"{r.model_repository}/{DIRECTION_MODELS_FILE}"
            log.info("shared directions answered by: %s (%s)", self.direction_models, source)

    def _version_path(self, name: str, version: str | None) -> Path:
        """The bundle folder of ``version`` (the highest on disk when None)."""
        root = self.settings.repository.model_repository
        available = versions_of(root, name)
        if not available:
            raise BundleError(f"{root}/{name}: no versions")
        chosen = version if version is not None else available[-1]
        if chosen not in available:
            raise BundleError(f"{root}/{name}: no version {chosen} (have {available})")
        return Path(root) / name / chosen

    def _limits(self) -> BatchLimits:
        b, access = self.settings.scheduling, self.settings.access
        return BatchLimits(
            max_sentences=1 if b.scheduler == "off" else b.max_batch_sentences,
            max_tokens=b.max_batch_tokens,
            max_wait_s=b.max_wait_ms / 1000.0,
            dispatch_when_idle=b.dispatch_when_idle,
            max_queue=b.max_queue_sentences,
            workers=self.settings.engine.engine_workers,
            max_queue_per_client=key_queue_cap(b.max_queue_sentences, access.key_queue_share) if access.api_keys else 0,
        )

    async def load(self, warm: Callable[[dict[str, LoadedModel]], None] | None = None) -> None:
        """Create sessions, warm each model up with a real translation, then start its scheduler; ``warm`` (in a
        thread) prepares what the first requests would otherwise wait for, before the server reports ready."""
        if self.settings.server.load_delay_s:
            await asyncio.sleep(self.settings.server.load_delay_s)
        for name, bundle in self.bundles.items():
            self.models[name] = await self._start(name, bundle)
        if warm is not None:
            await asyncio.to_thread(warm, dict(self.models))
        self.ready = True

    async def _start(self, name: str, bundle: Bundle) -> LoadedModel:
        """Engine (supervised, warmed up), scheduler: a model ready to take requests (not yet routed to)."""
        continuous = self.settings.scheduling.scheduler == "continuous"
        try:
            routes = directions_of(bundle.manifest).values()
        except DirectionError as exc:
            raise BundleError(f"{bundle.path}: {exc}") from exc
        worker = self._worker(name, bundle, continuous)
        try:
            await asyncio.to_thread(worker.start)
        except BaseException:
            worker.close()
            raise
        engine = worker.engine
        scheduler = self._scheduler(name, bundle, worker)
        scheduler.start()
        # the longest tag any of its directions puts before a source counts against the model's positions
        room = max(len(tag_ids(engine.tokenizer.encode, engine.tokenizer.sp.piece_to_id, d.tag)) for d in routes)
        max_subwords = min(self.settings.limits.max_tokens_per_text, engine.max_source_tokens - 1 - room)
        model = LoadedModel(name, bundle, worker, scheduler, engine.variant, max_subwords)
        self.metrics.model_info.labels(name, bundle.version, engine.variant, engine.providers[0]).set(1)
        log.info("model %s v%s ready (%s on %s)", name, bundle.version, engine.variant, engine.providers)
        return model

    def _worker(self, name: str, bundle: Bundle, continuous: bool) -> EngineWorker | ProcessEngineWorker:
        """The model's supervised engine: in a worker process (MT_ENGINE_PROCESS) or in this one."""
        e = self.settings.engine
        if e.engine_process and self.wrap_runner is None:
            return ProcessEngineWorker(
                name,
                bundle,
                self._spec(),
                self.metrics,
                e.engine_workers,
                continuous,
                self._fatal,
                e.engine_memory_limit_mb,
                self.settings.server.log_level,
            )
        if e.engine_process:
            log.warning("model %s: a runner wrapper (tests) keeps the engine in the server process", name)
        build = lambda: self._engine(bundle)  # noqa: E731 (the worker rebuilds the engine after a fault)
        return EngineWorker(name, build, self.metrics, self.wrap_runner, continuous, self._fatal)

    def _scheduler(self, name: str, bundle: Bundle, worker: EngineWorker | ProcessEngineWorker) -> Scheduler:
        """MT_SCHEDULER's scheduler; continuous batching falls back to dynamic for a bundle without an
        interface-3 decoder step graph (exported before it existed: re-export it)."""
        b = self.settings.scheduling

        def observe(key: object, size: int, seconds: float) -> None:  # an engine execution, for the statistics
            kind = "embed" if isinstance(key, EmbedOptions) else "translate"  # attention runs on the translator
            self.stats.execution(name, kind, bundle.version, size, seconds)

        if b.scheduler == "continuous":
            if worker.live is not None:
                limits = LiveLimits(b.max_live_rows, int(b.max_cache_mb * (1 << 20)))
                return continuous_scheduler(
                    name, worker.run_batch, self._limits(), self.metrics, worker.live, limits, observe
                )
            log.warning(
                "model %s v%s: MT_SCHEDULER=continuous needs a decoder_step graph of interface 3, which this bundle "
                "lacks; it is served with dynamic batching until it is re-exported (python -m export.cli export)",
                name,
                bundle.version,
            )
        return dynamic_scheduler(name, worker.run_batch, self._limits(), self.metrics, observe)

    def _fatal(self, reason: str) -> None:
        """A model's engine could not be restarted: the process exits non-zero (service/__main__.py)."""
        self.failed = reason

    def refusal(self, client: str = "") -> tuple[str, QueueFull] | None:
        """(model, its QueueFull) when no model's queue would take one more sentence from ``client`` (an API key's
        label: its share of each queue), the one with the shortest Retry-After; None when some queue would."""
        refusals = [(name, m.scheduler.refusal(1, client)) for name, m in self.models.items()]
        if not refusals or any(refusal is None for _, refusal in refusals):
            return None
        return min(refusals, key=lambda r: r[1].retry_after)  # type: ignore[union-attr]

    def restarting(self) -> list[str]:
        """The models whose engine is being restarted after a fault (not ready meanwhile)."""
        return sorted(name for name, model in self.models.items() if model.worker.restarting)

    async def load_version(
        self, name: str, version: str | None = None, reason: str = "loaded by POST /v1/models/{name}/load"
    ) -> tuple[LoadedModel, str]:
        """Serve ``version`` of ``name`` (the highest on disk when None) instead of the current one.

        Returns (the new model, the previous version). Raises BundleError (bad files) or RuntimeError (engine or
        warm-up failed) with the current version still serving; UnknownModel for a model that is not loaded.
        """
        if name not in self.models:
            raise UnknownModel(self.why_missing(name))
        async with self._swap_lock:
            if name not in self.models:  # unloaded meanwhile
                raise UnknownModel(self.why_missing(name))
            old = self.models[name]
            path, bundle = await self._read_version(name, version)
            try:
                new = await self._start(name, bundle)
            except Exception as exc:
                self.metrics.model_info.labels(name, old.bundle.version, old.variant, old.engine.providers[0]).set(1)
                raise RuntimeError(f"{path}: loading or warm-up failed ({type(exc).__name__}: {exc})") from exc
            self.bundles[name], self.models[name] = bundle, new
            self.reasons[name] = reason.format(name=name)
            old.replaced_by = new
            await old.scheduler.stop()  # accepted work finishes on the old version
            await asyncio.to_thread(old.worker.close)
            if old.bundle.version != new.bundle.version:
                self.metrics.model_info.remove(name, old.bundle.version, old.variant, old.engine.providers[0])
            log.info("model %s: version %s replaced version %s", name, new.bundle.version, old.bundle.version)
            if self.on_swap is not None:
                self.on_swap(name, new.bundle.version, self.reasons[name])
            return new, old.bundle.version

    async def _read_version(self, name: str, version: str | None) -> tuple[Path, Bundle]:
        """The bundle of ``version`` of ``name`` (the highest on disk when None), verified, off the event loop."""
        path = self._version_path(name, version)
        bundle = await asyncio.to_thread(load_bundle, path, True)
        if bundle.name != name:
            raise BundleError(f"{path}: the manifest names model {bundle.name!r}, not {name!r}")
        return path, bundle

    async def load_model(self, name: str, version: str | None, reason: str) -> tuple[LoadedModel, str | None]:
        """Serve ``version`` of ``name`` (the highest on disk when None): swap the version of a loaded model, or start
        one that is not loaded (unloaded, or in the repository but not in MT_MODELS). Returns (the model, the version
        it replaced or None). Raises as ``load_version`` does; UnknownModel for a name the repository lacks."""
        if name in self.models:
            return await self.load_version(name, version, reason)
        if name not in discover(self.settings.repository.model_repository):  # a folder name: never a path of the client
            raise UnknownModel(f"unknown model {name!r}: the model repository has no such model")
        async with self._swap_lock:
            if name in self.models:  # loaded meanwhile by another call
                return self.models[name], None
            path, bundle = await self._read_version(name, version)
            try:
                model = await self._start(name, bundle)
            except Exception as exc:
                raise RuntimeError(f"{path}: loading or warm-up failed ({type(exc).__name__}: {exc})") from exc
            self.bundles[name], self.models[name] = bundle, model
            self.reasons[name] = reason.format(name=name)
            self.unloaded.pop(name, None)
            log.info("model %s: version %s loaded", name, bundle.version)
            return model, None

    async def unload(self, name: str) -> LoadedModel:
        """Take ``name`` out of service: new requests for it are refused (UnknownModel: unloaded), what it accepted
        finishes, then its scheduler stops and its engine is dropped. Returns the model that served."""
        async with self._swap_lock:
            if name not in self.models:
                raise UnknownModel(self.why_missing(name))
            model = self.models.pop(name)
            model.unloaded = True
            self.unloaded[name] = model.version
            self.reasons.pop(name, None)
            await model.scheduler.stop()  # accepted work finishes
            await asyncio.to_thread(model.worker.close)
            self.metrics.model_info.remove(name, model.bundle.version, model.variant, model.engine.providers[0])
            log.info("model %s: version %s unloaded", name, model.bundle.version)
            return model

    def why_missing(self, name: str) -> str:
        """Why ``name`` is not served: unloaded (and how to serve it again), or unknown."""
        if name in self.unloaded:
            return (
                f"model {name!r} is unloaded (it served version {self.unloaded[name]}); an admin can load it again "
                f"with POST /v2/repository/models/{name}/load; loaded: {sorted(self.models)}"
            )
        return f"unknown model {name!r}; available: {sorted(self.models)}"

    async def reload_all(self) -> None:
        """SIGHUP: every loaded model to its pinned or highest version on disk; a bad one is logged and kept."""
        for name in list(self.models):
            pinned = self.settings.repository.model_versions.get(name)
            try:
                if self._version_path(name, pinned).name != self.models[name].bundle.version:
                    await self.load_version(name, pinned, "loaded on SIGHUP")
            except Exception:
                log.exception("model %s: reload refused; the current version keeps serving", name)

    def _engine(self, bundle: Bundle) -> Engine:
        """The engine of ``bundle`` in this process (engine_build.py, as a worker process builds it)."""
        return build_engine(bundle, self._spec())

    def _spec(self) -> EngineSpec:
        e = self.settings.engine
        return EngineSpec(
            e.providers,
            e.variant,
            e.intra_op_threads,
            e.inter_op_threads,
            e.shortlist,
            e.search_loop,
            e.fused_step,
            self.settings.limits.max_beam_size,
        )

    def get(self, name: str | None) -> LoadedModel:
        name = name or self.settings.repository.default_model
        if name not in self.models:
            raise UnknownModel(self.why_missing(name))
        return self.models[name]

    def info(self, name: str) -> dict[str, Any]:
        return {
            **self.models[name].info(),
            "versions_available": versions_of(self.settings.repository.model_repository, name),
            "version_reason": self.reasons.get(name),
        }

    def pairs(self) -> dict[tuple[str, str], str]:
        """(source language, target language) -> model name, every direction of each model (core/directions.py)."""
        served = directions_by_model({name: m.bundle for name, m in self.models.items()})
        return answering_models(served, self.settings.repository.default_model, self.direction_models)

    async def stop(self) -> None:
        for model in self.models.values():
            await model.scheduler.stop()
            await asyncio.to_thread(model.worker.close)
