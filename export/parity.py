"""PyTorch vs onnxruntime parity: graph outputs on random shapes, and translations of whole test sets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from core.graphs import (
    DECODER_INPUTS,
    DECODER_OUTPUTS,
    ENCODER_OUTPUTS,
    step_input_names,
    step_interface,
    step_output_names,
)
from export.graphs import DecoderGraph, EncoderGraph, example_inputs
from model.data import pad
from model.decoding import beam_search as torch_beam
from model.decoding import greedy_search as torch_greedy
from model.transformer import Transformer
from service.engine import Engine, TranslateOptions


@torch.no_grad()
def graph_max_diff(model: Transformer, engine: Engine, shapes: Sequence[tuple[int, int, int, int]]) -> dict[str, float]:
    """Max |ORT - PyTorch| per output over (batch, src, tgt, past) shapes, random ids and caches."""
    model.eval()
    encoder, decoder = EncoderGraph(model), DecoderGraph(model)
    worst: dict[str, float] = {}
    for batch, src, tgt, past in shapes:
        ex = example_inputs(model, batch=batch, src=src, tgt=tgt, past=past)
        ort_enc = engine.encoder.run(ENCODER_OUTPUTS, {"src_ids": ex["src_ids"].numpy()})
        for name, got, ref in zip(ENCODER_OUTPUTS, ort_enc, encoder(ex["src_ids"]), strict=True):
            worst[name] = max(worst.get(name, 0.0), float(np.abs(got - ref.numpy()).max()))
        feeds = {n: ex[n].numpy() for n in DECODER_INPUTS}
        ort_dec = engine.decoder.run(DECODER_OUTPUTS, feeds)
        for name, got, ref in zip(DECODER_OUTPUTS, ort_dec, decoder(*(ex[n] for n in DECODER_INPUTS)), strict=True):
            ref = ref.numpy()
            if name == "log_probs":  # compare where probabilities are not vanishingly small
                keep = ref > -30
                got, ref = got[keep], ref[keep]
            worst["decoder." + name] = max(worst.get("decoder." + name, 0.0), float(np.abs(got - ref).max()))
    return worst


@torch.no_grad()
def step_max_diff(model: Transformer, session, shapes: Sequence[tuple[int, int, int, int]]) -> dict[str, float]:
    """Max |ORT - PyTorch| of the lean decoder_step graph (one new token) over (batch, src, _, past) shapes.

    Interface-2 graphs take cross keys/values per source: an even batch then runs as batch / 2 sources of
    two rows each (as beam search does), compared with PyTorch on the sources repeated per row. Every
    source keeps one real token (the fused cross-attention is undefined on all-padding sources).
    """
    model.eval()
    n_layers = model.cfg.n_decoder_layers
    per_source = step_interface(session.get_modelmeta().custom_metadata_map) >= 2
    worst: dict[str, float] = {}
    for batch, src, _, past in shapes:
        group = 2 if per_source and batch % 2 == 0 else 1  # rows per source
        ex = example_inputs(model, batch=batch // group, src=src, tgt=1, past=past)
        ex["src_mask"][:, 0] = True  # the step graph needs one real source token (engine sources end with EOS)
        rows = example_inputs(model, batch=batch, src=src, tgt=1, past=past)  # tokens and caches per row

        def per_row(t: Tensor, group=group) -> Tensor:
            return t.repeat_interleave(group, dim=0)

        cross = [(ex["cross_keys"][i], ex["cross_values"][i]) for i in range(n_layers)]
        cache = [(rows["past_keys"][i], rows["past_values"][i]) for i in range(n_layers)]
        row_cross = [(per_row(k), per_row(v)) for k, v in cross] if per_source else cross
        out = model.decode(rows["tokens"], row_cross, per_row(ex["src_mask"]), cache)
        ref = torch.log_softmax(out.logits[:, -1].float(), dim=-1).numpy()
        top_k = min(8, model.cfg.vocab_size)  # > 0: interface-2 graphs run their TopK
        feeds = {"tokens": rows["tokens"].numpy(), "src_mask": ex["src_mask"].numpy(), "top_k": np.array([top_k])}
        for i in range(n_layers):
            feeds[f"cross_keys_{i}"], feeds[f"cross_values_{i}"] = cross[i][0].numpy(), cross[i][1].numpy()
            feeds[f"past_keys_{i}"], feeds[f"past_values_{i}"] = cache[i][0].numpy(), cache[i][1].numpy()
        got = dict(zip(step_output_names(n_layers), session.run(None, feeds), strict=True))
        assert set(feeds) == set(step_input_names(n_layers))
        keep = ref > -30  # compare where probabilities are not vanishingly small
        diffs = {"step.log_probs": float(np.abs(got["log_probs"][keep] - ref[keep]).max())}
        # the top-k outputs: the values of the ids they name, best first
        top_ref = np.take_along_axis(ref, got["top_ids"], axis=1)
        diffs["step.top_log_probs"] = float(np.abs(got["top_log_probs"] - top_ref).max())
        if (np.diff(got["top_log_probs"], axis=1) > 0).any() or not (
            got["top_log_probs"][:, -1] >= np.sort(ref, 1)[:, -top_k] - 1e-4
        ).all():
            diffs["step.top_log_probs"] = float("inf")  # not the best top_k, or not best first
        for i, (k, v) in enumerate(out.cache):
            diffs["step.present_keys"] = max(
                diffs.get("step.present_keys", 0.0), float(np.abs(got[f"present_keys_{i}"] - k.numpy()).max())
            )
            diffs["step.present_values"] = max(
                diffs.get("step.present_values", 0.0), float(np.abs(got[f"present_values_{i}"] - v.numpy()).max())
            )
        for name, value in diffs.items():
            worst[name] = max(worst.get(name, 0.0), value)
    return worst


@dataclass
class TranslationParity:
    beam_size: int
    total: int
    identical: int
    differing: list[int]

    @property
    def rate(self) -> float:
        return self.identical / max(self.total, 1)


def translation_parity(
    model: Transformer, engine: Engine, texts: Sequence[str], beam_size: int, batch_size: int = 32
) -> TranslationParity:
    """Token-identical best hypotheses of the PyTorch reference and the engine, batch by batch."""
    sources = engine.source_ids(texts)
    options = TranslateOptions(beam_size=beam_size)
    identical, differing = 0, []
    for start in range(0, len(sources), batch_size):
        chunk = sources[start : start + batch_size]
        src = pad(chunk)
        with torch.no_grad():
            ref = torch_greedy(model, src) if beam_size == 1 else [h[0] for h in torch_beam(model, src, beam_size)]
        got = engine.translate_ids(chunk, options)
        for offset, (r, g) in enumerate(zip(ref, got, strict=True)):
            if r.tokens == g.token_ids:
                identical += 1
            else:
                differing.append(start + offset)
    return TranslationParity(beam_size, len(sources), identical, differing)
