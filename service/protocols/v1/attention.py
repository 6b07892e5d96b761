"""POST /v1/attention: encoder, decoder and cross attention of a source and a given or generated target."""

from __future__ import annotations

from typing import Any

import numpy as np

from service.execution.work import AttentionOptions, Source
from service.models.registry import LoadedModel
from service.serving.common import run_work, tokenize
from service.serving.context import RequestContext


class OutOfRange(ValueError):
    """A requested layer or head the model does not have; ``field`` names the request field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def layer_counts(model: LoadedModel) -> dict[str, int]:
    """Layers of each kind of attention: the encoder's own depth; decoder self- and cross-attention the decoder's."""
    cfg = model.bundle.model_config
    return {"encoder": cfg["n_encoder_layers"], "decoder": cfg["n_decoder_layers"], "cross": cfg["n_decoder_layers"]}


def check_selection(
    model: LoadedModel, layers: list[int] | None, heads: list[int] | None, kinds: list[str] = ("encoder", "decoder")
) -> None:
    """OutOfRange for a head the model does not have, or a layer one of the asked ``kinds`` does not have (encoder
    and decoder may differ in depth: the shipped de-en has 6 and 3)."""
    heads_bound = model.bundle.model_config["n_heads"]
    bad = [v for v in heads or [] if v >= heads_bound]
    if bad:
        raise OutOfRange("heads", f"heads {bad} out of range: this model has {heads_bound} (0..{heads_bound - 1})")
    counts = layer_counts(model)
    for kind in kinds:
        bound = counts[kind]
        bad = [v for v in layers or [] if v >= bound]
        if bad:
            depths = ", ".join(f"{k} {n}" for k, n in counts.items() if k != "cross")
            raise OutOfRange(
                "layers",
                f"layers {bad} out of range: this model has {bound} {kind} layers (0..{bound - 1}); layers by kind: "
                f"{depths} (cross-attention: the decoder's); ask for kinds of different depths in separate requests",
            )


def select(matrix: np.ndarray, layers: list[int] | None, heads: list[int] | None, aggregate: str) -> list:
    if layers is not None:
        matrix = matrix[layers]
    if heads is not None:
        matrix = matrix[:, heads]
    if aggregate == "mean":
        matrix = matrix.mean(axis=1, keepdims=True)
    return matrix.tolist()


async def attention(model: LoadedModel, body: Any, ctx: RequestContext) -> dict[str, Any]:
    check_selection(model, body.layers, body.heads, body.kinds)
    [src] = tokenize(model, [body.source], ctx, "source")
    target = None if body.target is None else tokenize(model, [body.target], ctx, "target", target=True)[0][:-1]
    prefix = model.source_prefix  # a multilingual model's tag (service/serving/directions.py)
    [result], used = await run_work(model, AttentionOptions(), [Source(prefix + src, target)], ctx)
    result = untagged_attention(result, len(prefix))
    keys = ("source_tokens", "target_tokens", "target_text", "score")
    out = {"model": used.name, "version": used.version, **{k: result[k] for k in keys}}
    for kind in body.kinds:
        out[kind] = select(result[kind], body.layers, body.heads, body.aggregate)
    return out


def untagged_attention(result: dict[str, Any], n: int) -> dict[str, Any]:
    """The engine's attention of a tagged source without the tag's ``n`` positions: they are no source token of the
    answer (the rows then sum to what the source's own tokens got)."""
    if not n:
        return result
    out = dict(result, source_tokens=result["source_tokens"][n:])
    out["encoder"] = result["encoder"][..., n:, n:]  # (layers, heads, source, source)
    out["cross"] = result["cross"][..., n:]  # (layers, heads, target, source)
    return out
