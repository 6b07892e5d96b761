"""Loaded models: bundle verification at start-up, engines and their schedulers, warm-up, readiness."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.engine import Bundle, Engine, TranslateOptions, load_bundle
from service.engine.bundle import BundleError, discover
from service.metrics import Metrics
from service.scheduler import BatchLimits, Scheduler
from service.settings import Settings

log = logging.getLogger(__name__)

FAIL_BATCH_MARKER = "__mt_test_fail_batch__"  # only honoured when MT_ENABLE_TEST_HOOKS=true
SLOW_BATCH_MARKER = "__mt_test_slow_batch__"  # the same: its batch takes SLOW_BATCH_S longer (a slower machine)
SLOW_BATCH_S = 0.05


class UnknownModel(LookupError):
    pass


@dataclass
class LoadedModel:
    name: str
    bundle: Bundle
    engine: Engine
    scheduler: Scheduler
    variant: str

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
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings, self.metrics = settings, metrics
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
            scheduler = Scheduler(name, self._runner(engine), limits, self.metrics)
            scheduler.start()
            self.models[name] = LoadedModel(name, bundle, engine, scheduler, engine.variant)
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

    def _runner(self, engine: Engine):
        hooks = self.settings.enable_test_hooks

        def run(kind: str, key: Hashable, payloads: list[Any]) -> tuple[list[Any], dict[str, float]]:
            stats: dict[str, float] = {}
            if hooks and any(FAIL_BATCH_MARKER in str(p) for p in payloads):
                raise RuntimeError("test hook: injected engine failure")
            if hooks and any(SLOW_BATCH_MARKER in str(p) for p in payloads):
                time.sleep(SLOW_BATCH_S)
            if kind == "translate":
                options = TranslateOptions(*key[1:])
                return [r for r in engine.translate_ids([p["ids"] for p in payloads], options, stats)], stats
            if kind == "embed":
                _, pooling, normalize = key
                vectors = engine.embed_ids([p["ids"] for p in payloads], pooling, normalize, stats)
                return list(vectors), stats
            if kind == "attention":
                return [engine.attention_ids(p["ids"], p.get("target_ids")) for p in payloads], stats
            raise ValueError(f"unknown work kind {kind!r}")

        return run

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
