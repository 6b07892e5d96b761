"""The traced encoder against a lean one built node by node, as the decoder step is: speed-log item 41.

    python -m bench.experiments.lean_encoder --model checkpoints/general --bundle model_repository/de-en/3 \
        --data ../shared/data/multi30k [--split test_2016_flickr] [--calibration val] [--repeats 5]

The bundle's encoder graph is traced from PyTorch (export/onnx_export.py): per layer separate Q, K and V products,
then Reshape / Transpose / MatMul / Div / Where / Softmax / Where / MatMul, and six products for the decoder layers'
cross keys and values. The lean graph is written with export/graph_builder.py from the same checkpoint: one Q|K|V
product per layer, ``com.microsoft.MultiHeadAttention`` with the key padding mask, one product for all cross keys
and values, split and transposed into the traced graph's ``encoder_output``, ``cross_keys`` and ``cross_values``
(not ``encoder_attention``: the fused kernel does not return its weights, so the attention endpoint would keep the
traced graph). Its int8 twin goes through the exporter's own static quantization (export/quantize.py), calibrated
on the first --calibration-sentences of --calibration.

Prints each graph's node count after onnxruntime's optimizer, the largest difference of its outputs from the
traced graph's on real (unpadded) positions, and the process CPU time of every sentence of --split encoded alone
(the first --alone sentences) and in batches of 32 sorted by length, one thread, median of --repeats interleaved
timings after a warm-up.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from bench.harness import machine, now
from core.tokenizer import PAD_ID

OUTPUTS = ["encoder_output", "cross_keys", "cross_values"]


def build_lean_encoder(model):
    """The lean encoder graph of ``model`` (vanilla attention, absolute positions) as an ONNX ModelProto."""
    from export.graph_builder import GraphBuilder, supports_lean_graphs, weights

    if not supports_lean_graphs(model):
        raise ValueError("the lean graphs implement vanilla attention with absolute positions only")
    cfg = model.cfg
    b = GraphBuilder(model)
    real = b.one("Not", [b.one("Equal", ["src_ids", b.ints("pad_id", [cfg.pad_id])])])
    key_mask = b.one("Cast", [real], to=TensorProto.INT32)
    # positions 0..src-1 as CumSum(1) - 1: onnxruntime 1.2x fuses Gather(table, Range(...)) into a Slice it then
    # feeds a 2-D start, and the session fails at run time
    ones = b.one(
        "ConstantOfShape", [b.one("Shape", ["src_ids"], start=1, end=2)], value=helper.make_tensor("", 7, [1], [1])
    )
    first_axis = b.const("first_axis", np.array(0, dtype=np.int64))
    positions = b.one("Sub", [b.one("CumSum", [ones, first_axis]), b.ints("one", [1])])
    x = b.embed("src_ids", model.src_embed, positions)
    for i, layer in enumerate(model.encoder_layers):
        p, sa = f"encoder.{i}", layer.self_attn

        def attention(h: str, p=p, sa=sa) -> str:
            w_qkv = np.concatenate([weights(sa.q_proj.weight), weights(sa.k_proj.weight), weights(sa.v_proj.weight)])
            b_qkv = np.concatenate([weights(sa.q_proj.bias), weights(sa.k_proj.bias), weights(sa.v_proj.bias)])
            q, k, v = b.op(
                "Split", [b.one("MatMul", [h, b.const(f"{p}.qkv.weight", w_qkv.T)])], 3, axis=2, num_outputs=3
            )
            out = b.attention(q, k, v, [b.const(f"{p}.qkv.bias", b_qkv), key_mask])[0]
            return b.linear(out, sa.out_proj, f"{p}.out")

        x = b.residual(x, layer.attn_residual, attention, f"{p}.attn")
        x = b.residual(x, layer.ffn_residual, lambda h, p=p, f=layer.ffn: b.feed_forward(h, f, f"{p}.ffn"), f"{p}.ffn")
    if cfg.norm_placement == "pre":
        x = b.norm(x, model.encoder_norm, "encoder.final_norm")
    b.nodes.append(helper.make_node("Identity", [x], ["encoder_output"]))

    layers = [layer.cross_attn for layer in model.decoder_layers]
    w_kv = np.concatenate([weights(a.k_proj.weight) for a in layers] + [weights(a.v_proj.weight) for a in layers])
    b_kv = np.concatenate([weights(a.k_proj.bias) for a in layers] + [weights(a.v_proj.bias) for a in layers])
    kv = b.one("Add", [b.one("MatMul", [x, b.const("cross.kv.weight", w_kv.T)]), b.const("cross.kv.bias", b_kv)])
    n, heads, d_head = len(layers), cfg.n_heads, cfg.d_head
    shape = b.one("Concat", [b.one("Shape", ["src_ids"]), b.ints("cross.shape", [2, n, heads, d_head])], axis=0)
    kv = b.one("Transpose", [b.one("Reshape", [kv, shape])], perm=[2, 3, 0, 4, 1, 5])  # (2, layers, batch, h, src, d)
    keys, values = b.op("Split", [kv], 2, axis=0, num_outputs=2)
    b.ints("axis_0", [0])
    b.nodes.append(helper.make_node("Squeeze", [keys, "axis_0"], ["cross_keys"]))
    b.nodes.append(helper.make_node("Squeeze", [values, "axis_0"], ["cross_values"]))

    f32, cross = TensorProto.FLOAT, [n, "batch", heads, "src_len", d_head]
    return b.model_proto(
        "lean_encoder",
        [helper.make_tensor_value_info("src_ids", TensorProto.INT64, ["batch", "src_len"])],
        [
            helper.make_tensor_value_info("encoder_output", f32, ["batch", "src_len", cfg.d_model]),
            helper.make_tensor_value_info("cross_keys", f32, cross),
            helper.make_tensor_value_info("cross_values", f32, cross),
        ],
        {},
    )


def largest_difference(a: list[np.ndarray], b: list[np.ndarray], src: np.ndarray) -> float:
    """The largest |a - b| over the three outputs, on real source positions only (padding rows are not read)."""
    real = src != PAD_ID
    masks = [real[:, :, None], real[None, :, None, :, None], real[None, :, None, :, None]]
    return max(float(np.abs((x - y) * m).max()) for x, y, m in zip(a, b, masks, strict=True))


def node_count(session_path: Path) -> int:
    """Nodes of the graph after onnxruntime's optimizer (level all, as the engine's sessions)."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.intra_op_num_threads = 1
        options.log_severity_level = 3  # not the warning that an optimized graph may be machine-specific
        ort.InferenceSession(str(session_path), options)
        return len(onnx.load(options.optimized_model_filepath, load_external_data=False).graph.node)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.experiments.lean_encoder",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", type=Path, required=True, help="the checkpoint the bundle was exported from")
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--data", required=True, help="corpus folder with <split>.<source language>")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--calibration", default="val", help="split whose first sentences calibrate the int8 graph")
    parser.add_argument("--calibration-sentences", type=int, default=128)
    parser.add_argument("--alone", type=int, default=300, help="sentences timed one at a time")
    parser.add_argument("--variants", nargs="+", default=["fp32", "int8"])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    import onnx

    from core.bundle import load_bundle
    from export.quantize import quantize_int8_static
    from model.checkpoint import load_release
    from service.engine import Engine
    from service.engine.engine import pad_batch
    from service.engine.runtime import create_session

    model, _ = load_release(args.model)
    model.eval()
    bundle = load_bundle(args.bundle)
    language = bundle.manifest["source_language"]
    reference = Engine(bundle, "fp32", "cpu", intra_op_threads=1)

    def read(split: str) -> list[list[int]]:
        texts = (Path(args.data) / f"{split}.{language}").read_text(encoding="utf-8").splitlines()
        return reference.source_ids(texts)

    ids = read(args.split)
    alone = [pad_batch([s]) for s in ids[: args.alone]]
    ordered = sorted(ids, key=len)
    batches = [pad_batch(ordered[i : i + 32]) for i in range(0, len(ordered), 32)]
    calibration = read(args.calibration)[: args.calibration_sentences]
    feeds = [{"src_ids": pad_batch(calibration[i : i + 16])} for i in range(0, len(calibration), 16)]

    def cpu(session, inputs: list[np.ndarray]) -> float:
        started = time.process_time()
        for src in inputs:
            session.run(OUTPUTS, {"src_ids": src})
        return time.process_time() - started

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        lean_fp32 = Path(tmp) / "fp32.lean_encoder.onnx"
        onnx.save(build_lean_encoder(model), str(lean_fp32))
        for variant in args.variants:
            traced_path = args.bundle / bundle.manifest["variants"][variant]["encoder"]
            lean_path = lean_fp32
            if variant == "int8":
                lean_path = quantize_int8_static(lean_fp32, Path(tmp) / "int8.lean_encoder.onnx", feeds)
            elif variant != "fp32":
                raise ValueError(f"variant {variant}: fp32 or int8")
            traced, lean = create_session(traced_path), create_session(lean_path)
            probe = batches[len(batches) // 2]
            difference = largest_difference(
                traced.run(OUTPUTS, {"src_ids": probe}), lean.run(OUTPUTS, {"src_ids": probe}), probe
            )
            times = {"alone": ([], []), "batch 32": ([], [])}
            for name, inputs in (("alone", alone), ("batch 32", batches)):
                cpu(traced, inputs[:20]), cpu(lean, inputs[:20])  # warm-up
                for _ in range(args.repeats):
                    times[name][0].append(cpu(traced, inputs))
                    times[name][1].append(cpu(lean, inputs))
            rows.append((variant, node_count(traced_path), node_count(lean_path), difference, times))

    print(f"{now()} on {machine()}")
    print(
        f"{args.bundle}'s encoder (traced) against the lean graph from {args.model}; {args.split}: the first "
        f"{len(alone)} sentences alone, all {len(ids)} in batches of 32; one thread, CPU s, median of {args.repeats}"
    )
    ratios = "traced | lean | lean / traced"
    print(f"| variant | nodes traced / lean | max abs diff | alone: {ratios} | batch 32: {ratios} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for variant, nodes_traced, nodes_lean, difference, times in rows:
        cells = []
        for traced_times, lean_times in times.values():
            t, lean = float(np.median(traced_times)), float(np.median(lean_times))
            cells += [f"{t:.3f}", f"{lean:.3f}", f"{lean / t:.2f}x"]
        print(f"| {variant} | {nodes_traced} / {nodes_lean} | {difference:.2g} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
