"""Open Inference Protocol v2 (KServe, Triton): a model's views, their metadata, and inference on texts.

Each loaded model has two views:
- ``{name}``: translation. Input ``TEXT`` (BYTES, [-1]); outputs ``TRANSLATION`` (BYTES, [-1]) and ``SCORE``
  (FP32, [-1]: sum of the log-probabilities of the generated tokens, EOS included, as /v1's ``score``).
- ``{name}-embed``: sentence embeddings. Input ``TEXT``; output ``EMBEDDING`` (FP32, [-1, d]).
Request parameters: translation ``beam_size``, ``max_length``, ``length_penalty``, ``split_sentences``,
``format``; embeddings ``pooling``, ``normalize`` (the /v1 fields of the same names, with the same defaults).
Work goes through the model's scheduler exactly as /v1's does (service/serving/prepared.py, run_work).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.engine.engine import TranslateOptions
from service.registry import LoadedModel, Registry, UnknownModel
from service.serving.common import run_work, tokenize
from service.serving.context import RequestContext
from service.serving.prepared import prepare
from service.work import EmbedOptions, Source

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
    else:
        names = sorted(n + s for n in registry.models for s in ("", EMBED_SUFFIX))
        raise UnknownModel(f"unknown model {name!r}; available: {names}")
    if version is not None and version != view.model.version:
        raise UnknownModel(f"model {name!r} has no version {version!r} being served (it serves {view.model.version})")
    return view


def views(registry: Registry) -> list[View]:
    return [View(m, kind) for m in registry.models.values() for kind in ("translate", "embed")]


async def infer(
    view: View, texts: list[str], parameters: dict[str, Any], ctx: RequestContext
) -> tuple[dict[str, np.ndarray], LoadedModel]:
    """Outputs of the view for ``texts`` as numpy arrays by output name, and the model version that ran them."""
    if view.kind == "embed":
        options = EmbedOptions(parameters.get("pooling", "mean"), parameters.get("normalize", True))
        if not texts:
            d = int(view.model.bundle.model_config["d_model"])
            return {"EMBEDDING": np.zeros((0, d), dtype=np.float32)}, view.model
        sources = [Source(ids) for ids in tokenize(view.model, texts, ctx)]
        vectors, used = await run_work(view.model, options, sources, ctx)
        return {"EMBEDDING": np.stack(vectors).astype(np.float32)}, used
    options = TranslateOptions(
        beam_size=parameters.get("beam_size", 4),
        max_length=parameters.get("max_length"),
        length_penalty=parameters.get("length_penalty", 0.6),
    )
    split, fmt = parameters.get("split_sentences", True), parameters.get("format", "text")
    prepared = prepare(view.model, texts, ctx, split, fmt)
    results, used = await prepared.run(options, ctx)
    return {
        "TRANSLATION": np.array([t.text for t in results], dtype=object),
        "SCORE": np.array([t.score for t in results], dtype=np.float32),
    }, used
