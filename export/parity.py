"""PyTorch vs onnxruntime parity: graph outputs on random shapes, and translations of whole test sets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from core.graphs import (
    ENCODER_OUTPUTS,
    VOCAB_IDS,
    decoder_cache,
    decoder_inputs,
    decoder_outputs,
    has_vocab_ids,
    right_padded,
    step_input_names,
    step_interface,
    step_output_names,
)
from engine import Engine
from engine.decoding import TranslateOptions
from engine.step_inputs import ragged_inputs, uniform_inputs
from export.graphs import EncoderGraph, decoder_graph, example_inputs
from model.data import pad
from model.decoding import beam_search as torch_beam
from model.decoding import greedy_search as torch_greedy
from model.transformer import Transformer


@torch.no_grad()
def graph_max_diff(model: Transformer, engine: Engine, shapes: Sequence[tuple[int, int, int, int]]) -> dict[str, float]:
    """Max |ORT - PyTorch| per output over (batch, src, tgt, past) shapes, random ids and caches (key/value caches
    of ``past`` tokens, or running states of ``past`` tokens for linear attention)."""
    model.eval()
    encoder, decoder = EncoderGraph(model), decoder_graph(model)
    cache = decoder_cache([i.name for i in engine.decoder.get_inputs()])
    inputs, outputs = decoder_inputs(cache), decoder_outputs(cache)
    worst: dict[str, float] = {}
    for batch, src, tgt, past in shapes:
        ex = example_inputs(model, batch=batch, src=src, tgt=tgt, past=past)
        ort_enc = engine.encoder.run(ENCODER_OUTPUTS, {"src_ids": ex["src_ids"].numpy()})
        for name, got, ref in zip(ENCODER_OUTPUTS, ort_enc, encoder(ex["src_ids"]), strict=True):
            worst[name] = max(worst.get(name, 0.0), float(np.abs(got - ref.numpy()).max()))
        feeds = {n: ex[n].numpy() for n in inputs}
        ort_dec = engine.decoder.run(outputs, feeds)
        for name, got, ref in zip(outputs, ort_dec, decoder(*(ex[n] for n in inputs)), strict=True):
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
    interface = step_interface(session.get_modelmeta().custom_metadata_map)
    per_source = interface >= 2
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
        ref = model.log_probs(out.logits[:, -1]).numpy()
        top_k = min(8, model.cfg.vocab_size)  # > 0: interface-2 graphs run their TopK
        feeds = {"tokens": rows["tokens"].numpy(), "src_mask": ex["src_mask"].numpy(), "top_k": np.array([top_k])}
        for i in range(n_layers):
            feeds[f"cross_keys_{i}"], feeds[f"cross_values_{i}"] = cross[i][0].numpy(), cross[i][1].numpy()
            feeds[f"past_keys_{i}"], feeds[f"past_values_{i}"] = cache[i][0].numpy(), cache[i][1].numpy()
        if interface >= 3:  # every row at position past, rows grouped by source
            feeds.update(uniform_inputs(batch, batch // group, past))
        assert set(feeds) == set(step_input_names(n_layers, interface))
        if has_vocab_ids(session):  # a shortlisted bundle's graph: an empty subset is the whole vocabulary
            feeds[VOCAB_IDS] = np.zeros(0, np.int64)
        got = dict(zip(step_output_names(n_layers), session.run(None, feeds), strict=True))
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


@torch.no_grad()
def ragged_step_max_diff(model: Transformer, session, seed: int = 0, max_past: int = 12) -> dict[str, float]:
    """Max |ORT - PyTorch| of an interface-3 or 4 step whose rows sit at different positions and read sources with
    different numbers of rows (1, 3, 2 and a source without rows), in shuffled row order, over a padded cache
    (right padded for interface 4, left padded for 3) whose padding holds random keys and huge values (the mask
    must hide them; the fused kernel adds -10000 to masked scores, so padding keys must stay of the size of real
    ones: the engine pads with zeros). Each row is compared with PyTorch decoding that row alone on its real cache."""
    model.eval()
    cfg, n_layers = model.cfg, model.cfg.n_decoder_layers
    right = right_padded(step_interface(session.get_modelmeta().custom_metadata_map))
    gen = torch.Generator().manual_seed(seed)
    row_sources = np.array([1, 0, 1, 2, 1, 2])[np.random.default_rng(seed).permutation(6)]
    n_sources, rows = 4, len(row_sources)  # source 3 has no rows
    lengths = torch.randint(0, max_past + 1, (rows,), generator=gen)
    lengths[0] = max_past  # the widest row sets the cache width
    width = int(lengths.max())
    ex = example_inputs(model, batch=n_sources, src=9, tgt=1, past=0)
    ex["src_mask"][:, 0] = True
    tokens = torch.randint(4, cfg.vocab_size, (rows, 1), generator=gen)
    shape = (rows, cfg.n_heads, width, cfg.d_head)
    caches = [(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)) for _ in range(n_layers)]
    feeds = {"tokens": tokens.numpy(), "src_mask": ex["src_mask"].numpy(), "top_k": np.array([4])}
    feeds.update(ragged_inputs(lengths.numpy(), row_sources, n_sources, width, right))

    def real(r: int) -> slice:  # row r's real cache columns
        return slice(0, int(lengths[r])) if right else slice(width - int(lengths[r]), width)

    padded = []
    for i, (k, v) in enumerate(caches):
        k, v = k.clone(), v.clone()
        for r in range(rows):  # the padding beside each row's real entries: garbage the mask must hide
            pad = slice(int(lengths[r]), width) if right else slice(0, width - int(lengths[r]))
            k[r, :, pad] = 3 * torch.randn(k[r, :, pad].shape, generator=gen)
            v[r, :, pad] = 1e4
        padded.append((k, v))
        feeds[f"cross_keys_{i}"] = ex["cross_keys"][i].numpy()
        feeds[f"cross_values_{i}"] = ex["cross_values"][i].numpy()
        feeds[f"past_keys_{i}"], feeds[f"past_values_{i}"] = k.numpy(), v.numpy()
    assert set(feeds) == set(step_input_names(n_layers, 3))
    got = dict(zip(step_output_names(n_layers), session.run(None, feeds), strict=True))
    worst = {"ragged.log_probs": 0.0, "ragged.present_keys": 0.0}
    for r, s in enumerate(row_sources.tolist()):
        cross = [(ex["cross_keys"][i][s : s + 1], ex["cross_values"][i][s : s + 1]) for i in range(n_layers)]
        cache = [(k[r : r + 1, :, real(r)], v[r : r + 1, :, real(r)]) for k, v in padded]
        out = model.decode(tokens[r : r + 1], cross, ex["src_mask"][s : s + 1], cache)
        ref = model.log_probs(out.logits[0, -1]).numpy()
        keep = ref > -30
        diff = float(np.abs(got["log_probs"][r][keep] - ref[keep]).max())
        worst["ragged.log_probs"] = max(worst["ragged.log_probs"], diff)
        present = slice(0, int(lengths[r]) + 1) if right else slice(width - int(lengths[r]), width + 1)
        for i, (k, _) in enumerate(out.cache):
            diff = float(np.abs(got[f"present_keys_{i}"][r, :, present] - k[0].numpy()).max())
            worst["ragged.present_keys"] = max(worst["ragged.present_keys"], diff)
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
    options = TranslateOptions(beam_size=beam_size, no_repeat_ngram_size=0)  # the searches PyTorch's reference runs
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
