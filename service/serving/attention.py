"""POST /v1/attention: encoder, decoder and cross attention of a source and a given or generated target."""

from __future__ import annotations

from typing import Any

import numpy as np

from service.registry import LoadedModel
from service.serving.common import run_work, tokenize
from service.serving.context import RequestContext
from service.work import AttentionOptions, Source


class OutOfRange(ValueError):
    """A requested layer or head the model does not have; ``field`` names the request field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_selection(model: LoadedModel, layers: list[int] | None, heads: list[int] | None) -> None:
    cfg = model.bundle.model_config
    n_layers = min(cfg["n_encoder_layers"], cfg["n_decoder_layers"])
    for field, values, bound in (("layers", layers, n_layers), ("heads", heads, cfg["n_heads"])):
        bad = [v for v in values or [] if v >= bound]
        if bad:
            raise OutOfRange(field, f"{field} {bad} out of range: this model has {bound} (0..{bound - 1})")


def select(matrix: np.ndarray, layers: list[int] | None, heads: list[int] | None, aggregate: str) -> list:
    if layers is not None:
        matrix = matrix[layers]
    if heads is not None:
        matrix = matrix[:, heads]
    if aggregate == "mean":
        matrix = matrix.mean(axis=1, keepdims=True)
    return matrix.tolist()


async def attention(model: LoadedModel, body: Any, ctx: RequestContext) -> dict[str, Any]:
    check_selection(model, body.layers, body.heads)
    [src] = tokenize(model, [body.source], ctx, "source")
    target = None if body.target is None else tokenize(model, [body.target], ctx, "target", target=True)[0][:-1]
    [result], used = await run_work(model, AttentionOptions(), [Source(src, target)], ctx)
    keys = ("source_tokens", "target_tokens", "target_text", "score")
    out = {"model": used.name, "version": used.version, **{k: result[k] for k in keys}}
    for kind in body.kinds:
        out[kind] = select(result[kind], body.layers, body.heads, body.aggregate)
    return out
