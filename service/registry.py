"""Loaded models: bundle verification at start-up, engines and their schedulers, warm-up, readiness."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.engine import Bundle, Engine, TranslateOptions, load_bundle
from service.engine.bundle import BundleError, discover
from service.metrics import Metrics
from service.scheduler import BatchLimits, Scheduler
from service.settings import Settings
from service.work import BatchRunner, engine_runner

log = logging.getLogger(__name__)

# wrap_runner(runner, engine) -> runner: how tests put a fault injector between a scheduler and its engine
RunnerWrapper = Callable[[BatchRunner, Engine], BatchRunner]


class UnknownModel(LookupError):
    pass


@dataclass
class LoadedModel:
    name: str
    bundle: Bundle
    engine: Engine
    scheduler: Scheduler
    variant: str
    max_source_subwords: int  # per text, EOS excluded: the model's limit and MT_MAX_TOKENS_PER_TEXT, the lower

    def info(self) -> dict[str, Any]:
        m = self.bundle.manifest
        variant = m["variants"][self.variant]
        return {
            "name": self.name,
            "version": self.bundle.version,
            "source_language": m["source_language"],
            "target_language": m["target_language"],
            "parameters": m["parameters"],
            "variant": self.variant,
            "variants": self.bundle.variants,
            "bleu": variant.get("bleu"),
            "providers": self.engine.providers,
            "max_source_tokens": self.engine.max_source_tokens,
            "layers": {"encoder": m["model"]["n_encoder_layers"], "decoder": m["model"]["n_decoder_layers"]},
            "heads": m["model"]["n_heads"],
            "dimension": m["model"]["d_model"],
        }


def choose_variant(bundle: Bundle, setting: str, providers: list[str]) -> str:
    if setting != "auto":
        if setting not in bundle.variants:
            raise BundleError(f"{bundle.path}: MT_VARIANT={setting} but the bundle has {bundle.variants}")
        return setting
    if providers and providers[0] == "CUDAExecutionProvider":  # int8 (CPU kernels) is never picked for a GPU
        return "fp16" if "fp16" in bundle.variants else "fp32"
    return bundle.default_variant


class Registry:
    def __init__(self, settings: Settings, metrics: Metrics, wrap_runner: RunnerWrapper | None = None) -> None:
        self.settings, self.metrics, self.wrap_runner = settings, metrics, wrap_runner
        self.bundles: dict[str, Bundle] = {}
        self.models: dict[str, LoadedModel] = {}
        self.ready = False
        self.failed: str | None = None

    def verify(self) -> None:
        """Find and hash-check every bundle to load; raises BundleError naming the bad file."""
        found = discover(self.settings.model_repository)
        wanted = self.settings.models or sorted(found)
        if not wanted:
            raise BundleError(f"{self.settings.model_repository}: no model bundles found (expected <name>/<version>/)")
        for name in wanted:
            if name not in found:
                raise BundleError(f"{self.settings.model_repository}/{name}: no bundle (have {sorted(found)})")
            self.bundles[name] = load_bundle(found[name], verify=True)
        if self.settings.default_model not in self.bundles:
            raise BundleError(f"default model {self.settings.default_model!r} is not among {sorted(self.bundles)}")

    async def load(self) -> None:
        """Create sessions, warm each model up with a real translation, then start its scheduler."""
        s = self.settings
        if s.load_delay_s:
            await asyncio.sleep(s.load_delay_s)
        limits = BatchLimits(
            max_sentences=s.effective_max_batch_sentences,
            max_tokens=s.max_batch_tokens,
            max_wait_s=s.max_wait_ms / 1000.0,
            max_queue=s.max_queue_sentences,
            workers=s.engine_workers,
        )
        for name, bundle in self.bundles.items():
            engine = await asyncio.to_thread(self._engine, bundle)
            await asyncio.to_thread(engine.translate, ["Warm-up."], TranslateOptions(beam_size=2))
            runner = engine_runner(engine)
            if self.wrap_runner is not None:
                runner = self.wrap_runner(runner, engine)
            scheduler = Scheduler(name, runner, limits, self.metrics)
            scheduler.start()
            max_subwords = min(s.max_tokens_per_text, engine.max_source_tokens - 1)
            self.models[name] = LoadedModel(name, bundle, engine, scheduler, engine.variant, max_subwords)
            self.metrics.model_info.labels(name, bundle.version, engine.variant, engine.providers[0]).set(1)
            log.info("model %s v%s ready (%s on %s)", name, bundle.version, engine.variant, engine.providers)
        self.ready = True

    def _engine(self, bundle: Bundle) -> Engine:
        s = self.settings
        probe_variant = bundle.default_variant if s.variant == "auto" else s.variant
        engine = Engine(bundle, probe_variant, s.providers, s.intra_op_threads, s.inter_op_threads)
        variant = choose_variant(bundle, s.variant, engine.providers)
        if variant != engine.variant:
            engine = Engine(bundle, variant, s.providers, s.intra_op_threads, s.inter_op_threads)
        return engine

    def get(self, name: str | None) -> LoadedModel:
        name = name or self.settings.default_model
        if name not in self.models:
            known = sorted(self.bundles)
            raise UnknownModel(f"unknown model {name!r}; available: {known}")
        return self.models[name]

    async def stop(self) -> None:
        for model in self.models.values():
            await model.scheduler.stop()


def bundle_paths(settings: Settings) -> dict[str, Path]:
    return discover(settings.model_repository)
