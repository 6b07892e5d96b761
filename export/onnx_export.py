"""Export a trained Transformer to the encoder and decoder ONNX graphs (torch.onnx dynamo exporter)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import onnx
import torch
from torch.export import Dim

from core.graphs import (
    BATCH_STEP,
    BATCH_STEP_INTERFACE,
    ENCODER_INPUTS,
    ENCODER_OUTPUTS,
    KV_CACHE,
    LINEAR_STATE,
    LIVE_STEP,
    decoder_inputs,
    decoder_outputs,
)
from export.decoder_step import build_decoder_step, supports_decoder_step
from export.graphs import EncoderGraph, decoder_graph, example_inputs
from model.transformer import Transformer

OPSET = 18


def _dims(model: Transformer) -> dict[str, Dim]:
    limit = model.cfg.max_positions
    return {
        "batch": Dim("batch", min=1, max=4096),
        "src": Dim("src_len", min=1, max=limit),
        "tgt": Dim("tgt_len", min=1, max=limit),
        "past": Dim("past_len", min=0, max=limit - 1),
    }


def export_graphs(
    model: Transformer, out_dir: Path, decoder_step: bool = False, batch_step: bool = True
) -> dict[str, Path]:
    """Write encoder.onnx and decoder.onnx (fp32, one file each) into ``out_dir``; onnx.checker passes.

    With ``decoder_step``, also the lean search graphs (export/decoder_step.py) when the architecture has them
    (vanilla attention with sinusoidal or learned positions; for the others engines search with decoder.onnx):
    decoder_step.onnx (the current interface: the live decode's) and, with ``batch_step``, decoder_step_batch.onnx
    (interface 3, for whole-batch search; core/graphs.py BATCH_STEP). Both read the same weights, which the
    bundle's packing stores once (export/pack.py).
    """
    model = model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    d = _dims(model)
    ex = example_inputs(model, batch=2, src=7, tgt=3, past=3)  # sizes > 1 keep every axis dynamic
    paths = {"encoder": out_dir / "encoder.onnx", "decoder": out_dir / "decoder.onnx"}
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            EncoderGraph(model),
            (ex["src_ids"],),
            str(paths["encoder"]),
            dynamo=True,
            external_data=False,
            opset_version=OPSET,
            input_names=ENCODER_INPUTS,
            output_names=ENCODER_OUTPUTS,
            dynamic_shapes={"src_ids": {0: d["batch"], 1: d["src"]}},
            verbose=False,
        )
        cache = LINEAR_STATE if model.cfg.attention == "linear" else KV_CACHE
        kv = {1: d["batch"], 3: d["src"]}
        if cache == KV_CACHE:
            past = {1: d["batch"], 3: d["past"]}
            past_shapes = {"past_keys": past, "past_values": past}
        else:  # a running state: the same size whatever the length
            past_shapes = {"past_kv_sums": {1: d["batch"]}, "past_k_sums": {1: d["batch"]}, "past_length": None}
        names = decoder_inputs(cache)
        torch.onnx.export(
            decoder_graph(model),
            tuple(ex[name] for name in names),
            str(paths["decoder"]),
            dynamo=True,
            external_data=False,
            opset_version=OPSET,
            input_names=names,
            output_names=decoder_outputs(cache),
            dynamic_shapes={
                "tokens": {0: d["batch"], 1: d["tgt"]},
                "src_mask": {0: d["batch"], 1: d["src"]},
                "cross_keys": kv,
                "cross_values": kv,
                **past_shapes,
            },
            verbose=False,
        )
    if decoder_step and supports_decoder_step(model):
        paths[LIVE_STEP] = out_dir / f"{LIVE_STEP}.onnx"
        onnx.save(build_decoder_step(model), str(paths[LIVE_STEP]))
        if batch_step:
            paths[BATCH_STEP] = out_dir / f"{BATCH_STEP}.onnx"
            onnx.save(build_decoder_step(model, interface=BATCH_STEP_INTERFACE), str(paths[BATCH_STEP]))
    for path in paths.values():
        onnx.checker.check_model(str(path), full_check=True)
    return paths


def graph_signature(path: Path) -> dict[str, list[dict[str, object]]]:
    """Input/output names, element types and shapes (symbolic dims by name) of an ONNX file."""
    graph = onnx.load(str(path), load_external_data=False).graph

    def describe(values) -> list[dict[str, object]]:
        out = []
        for v in values:
            t = v.type.tensor_type
            shape = [dim.dim_param or dim.dim_value for dim in t.shape.dim]
            out.append({"name": v.name, "type": onnx.TensorProto.DataType.Name(t.elem_type).lower(), "shape": shape})
        return out

    return {"inputs": describe(graph.input), "outputs": describe(graph.output)}
