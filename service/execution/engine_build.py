"""How a model's engine is built from its bundle and the engine settings: in the server process, or in an engine
worker process (service/execution/engine_process.py), which gets the same ``EngineSpec`` (plain values, pickled)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from core.bundle import Bundle, BundleError
from engine.decoding import DecodingDefaults
from engine.engine import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineSpec:
    """The engine settings (service/settings.py EngineSettings) one engine is built with, and the beam cap."""

    providers: str = "auto"
    variant: str = "auto"
    intra_op_threads: int = 1
    inter_op_threads: int = 1
    shortlist: bool = True
    search_loop: bool = True
    fused_step: bool | str = False
    max_beam_size: int = 16

    def session_options(self) -> dict:
        options = asdict(self)
        for name in ("providers", "variant", "max_beam_size"):
            options.pop(name)
        return options


def choose_variant(bundle: Bundle, setting: str, providers: list[str]) -> str:
    if setting != "auto":
        if setting not in bundle.variants:
            raise BundleError(f"{bundle.path}: MT_VARIANT={setting} but the bundle has {bundle.variants}")
        return setting
    if providers and providers[0] == "CUDAExecutionProvider":  # int8 (CPU kernels) is never picked for a GPU
        return "fp16" if "fp16" in bundle.variants else "fp32"
    return bundle.default_variant


def build_engine(bundle: Bundle, spec: EngineSpec) -> Engine:
    """The engine of ``bundle``: the variant MT_VARIANT names (auto: the providers' best), the default beam capped."""
    probe_variant = bundle.default_variant if spec.variant == "auto" else spec.variant
    # the continuous scheduler too: its whole batches (a blocked request that does not stream, worker.py) search a
    # lone sentence in the loop; the session is created on first use, so a server whose work all decodes live holds
    # none
    options = spec.session_options()
    engine = Engine(bundle, probe_variant, spec.providers, **options)
    variant = choose_variant(bundle, spec.variant, engine.providers)
    if variant != engine.variant:
        engine = Engine(bundle, variant, spec.providers, **options)
    cap = spec.max_beam_size  # a request may not ask more; neither may a bundle's default
    if int(engine.decoding.get("beam_size", 0)) > cap:
        log.warning(
            "%s: default beam %s above MT_MAX_BEAM_SIZE %d: %d", bundle.path, engine.decoding["beam_size"], cap, cap
        )
        engine.decoding["beam_size"] = cap
        engine.defaults = DecodingDefaults.of(engine.decoding)
    return engine
