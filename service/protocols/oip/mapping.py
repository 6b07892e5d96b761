"""Open Inference Protocol v2 (KServe, Triton): a model's views, their metadata, and inference on texts.

Each loaded model has two views:
- ``{name}``: translation. Input ``TEXT`` (BYTES, [-1]); outputs ``TRANSLATION`` (BYTES, [-1]), ``SCORE``
  (FP32, [-1]: sum of the log-probabilities of the generated tokens, EOS included, as /v1's ``score``) and
  ``WARNINGS`` (BYTES, [-1]: each text's /v1 ``warnings`` as a JSON list of {"code", "message"}; "[]" for none, and
  for HTML, which is not assessed, as on /v1).
- ``{name}-embed``: sentence embeddings. Input ``TEXT``; output ``EMBEDDING`` (FP32, [-1, d]).
Request parameters: translation ``beam_size``, ``max_length``, ``length_penalty``, ``split_sentences``,
``format``, ``source_language`` / ``target_language`` (a direction of a multilingual model: its own pair when
absent); embeddings ``pooling``, ``normalize`` (the /v1 fields of the same names, with the same defaults).
Work goes through the model's scheduler exactly as /v1's does (service/serving/prepared.py, run_work), and the
language policy applies as on /v1 (MT_LANGUAGE_MISMATCH=reject refuses a text in another language: LanguageMismatch).
Where the time goes is added to ``ctx.timing`` (service/observability/inference_stats.py): tokenization here, queue and
engine by
the scheduler.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.bundle import discover
from engine.decoding import TranslateOptions
from service.execution.work import EmbedOptions, Source
from service.models.registry import LoadedModel, Registry, UnknownModel
from service.serving.common import run_work, tokenize
from service.serving.context import RequestContext
from service.serving.html import plain_text
from service.serving.prepared import prepare
from service.serving.quality import check_languages, text_assessment
from service.serving.routing import in_languages

EMBED_SUFFIX = "-embed"
PLATFORM = "mtserve_onnxruntime"


@dataclass(frozen=True)
class View:
    model: LoadedModel
    kind: str  # "translate" | "embed"

    @property
    def name(self) -> str:
        return self.model.name + (EMBED_SUFFIX if self.kind == "embed" else "")

    @property
    def outputs(self) -> list[dict[str, Any]]:
        if self.kind == "embed":
            d = int(self.model.bundle.model_config["d_model"])
            return [{"name": "EMBEDDING", "datatype": "FP32", "shape": [-1, d]}]
        return [
            {"name": "TRANSLATION", "datatype": "BYTES", "shape": [-1]},
            {"name": "SCORE", "datatype": "FP32", "shape": [-1]},
            {"name": "WARNINGS", "datatype": "BYTES", "shape": [-1]},
        ]

    def metadata(self) -> dict[str, Any]:
        source, target = self.model.languages
        return {
            "name": self.name,
            "versions": [self.model.version],
            "platform": PLATFORM,
            "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}],
            "outputs": self.outputs,
            "parameters": {"source_language": source, "target_language": target, "kind": self.kind},
        }


def view_of(registry: Registry, name: str, version: str | None = None) -> View:
    """The view a v2 model name stands for; UnknownModel (404) for an unknown name or a version not served."""
    if name in registry.models:
        view = View(registry.get(name), "translate")
    elif name.endswith(EMBED_SUFFIX) and name[: -len(EMBED_SUFFIX)] in registry.models:
        view = View(registry.get(name[: -len(EMBED_SUFFIX)]), "embed")
    elif model_of(registry, name) in registry.unloaded:
        raise UnknownModel(registry.why_missing(model_of(registry, name)))
    else:
        names = sorted(n + s for n in registry.models for s in ("", EMBED_SUFFIX))
        raise UnknownModel(f"unknown model {name!r}; available: {names}")
    if version is not None and version != view.model.version:
        raise UnknownModel(f"model {name!r} has no version {version!r} being served (it serves {view.model.version})")
    return view


def views(registry: Registry) -> list[View]:
    return [View(m, kind) for m in registry.models.values() for kind in ("translate", "embed")]


def repository_index(registry: Registry, ready_only: bool = False) -> list[dict[str, str]]:
    """The model repository extension's index: each view of every model in the repository, READY when served, else
    UNAVAILABLE with the reason (unloaded, or not among MT_MODELS) and the version it served or would serve."""
    entries = [{"name": v.name, "version": v.model.version, "state": "READY"} for v in views(registry)]
    if ready_only:
        return entries
    root = registry.settings.repository.model_repository
    for name, path in sorted(discover(root).items()):
        if name in registry.models:
            continue
        unloaded = registry.unloaded.get(name)
        version, reason = (unloaded, "unloaded") if unloaded else (path.name, "not loaded (not among MT_MODELS)")
        for suffix in ("", EMBED_SUFFIX):
            entries.append({"name": name + suffix, "version": version, "state": "UNAVAILABLE", "reason": reason})
    return entries


def model_of(registry: Registry, name: str) -> str:
    """The model a view name stands for, loaded or not (the repository extension loads models, not views)."""
    if name.endswith(EMBED_SUFFIX) and name not in registry.models and name not in registry.unloaded:
        return name[: -len(EMBED_SUFFIX)]
    return name


def statistics(registry: Registry, name: str | None = None, version: str | None = None) -> list[dict[str, Any]]:
    """The statistics extension's ``model_stats``: every served view (or the view ``name``, of ``version`` when
    given: UnknownModel when it is not served)."""
    chosen = views(registry) if name is None else [view_of(registry, name, version)]
    return [registry.stats.snapshot(v.model.name, v.kind, v.model.version, v.name) for v in chosen]


async def infer(
    view: View, texts: list[str], parameters: dict[str, Any], ctx: RequestContext
) -> tuple[dict[str, np.ndarray], LoadedModel]:
    """Outputs of the view for ``texts`` as numpy arrays by output name, and the model version that ran them."""
    started = time.perf_counter()
    if view.kind == "embed":
        options = EmbedOptions(parameters.get("pooling", "mean"), parameters.get("normalize", True))
        if not texts:
            d = int(view.model.bundle.model_config["d_model"])
            return {"EMBEDDING": np.zeros((0, d), dtype=np.float32)}, view.model
        sources = [Source(ids) for ids in tokenize(view.model, texts, ctx)]
        _prepared(ctx, started)
        vectors, used = await run_work(view.model, options, sources, ctx)
        return {"EMBEDDING": np.stack(vectors).astype(np.float32)}, used
    options = TranslateOptions.request(
        beam_size=parameters.get("beam_size"),  # None: the model's default
        max_length=parameters.get("max_length"),
        length_penalty=parameters.get("length_penalty"),  # None: the model's default
    )
    split, fmt = parameters.get("split_sentences", True), parameters.get("format", "text")
    # a multilingual model's direction (service/serving/directions.py); its own pair when the parameters name none
    model = in_languages(view.model, parameters.get("source_language"), parameters.get("target_language"))
    if ctx.quality is not None:
        check_languages([model] * len(texts), texts, ctx.quality)
    prepared = prepare(model, texts, ctx, split, fmt)
    _prepared(ctx, started)
    results, used = await prepared.run(options, ctx)
    warnings = [
        text_assessment(
            used,
            text if fmt == "text" else plain_text(text, used.languages[0]),
            t,
            options,
            ctx.quality,
            split if fmt == "text" else True,
        )[1]
        for text, t in zip(texts, results, strict=True)
    ]
    return {
        "TRANSLATION": np.array([t.text for t in results], dtype=object),
        "SCORE": np.array([t.score for t in results], dtype=np.float32),
        "WARNINGS": np.array([json.dumps(w, ensure_ascii=False) for w in warnings], dtype=object),
    }, used


def _prepared(ctx: RequestContext, started: float) -> None:
    """The request's input is ready for the engine: splitting and tokenization took since ``started``."""
    if ctx.timing is not None:
        ctx.timing.input_s += time.perf_counter() - started
