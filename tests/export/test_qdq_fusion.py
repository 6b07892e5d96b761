"""Static int8 graphs after export/qdq_fusion.py: one MatMulIntegerToFloat per projection with its bias, float
residuals and graph outputs, and results closer to fp32 than the plain QDQ graph's."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from core.bundle import load_bundle
from export.pack import weight_names
from export.quantize import quantize_int8_static

D = 32


def _float_model(path, rng) -> None:
    """y = x + (x W + b) (a residual around a projection); z = x W2 (no bias); x is also an output."""
    inits = [
        numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32) * 0.2, "W"),
        numpy_helper.from_array(rng.standard_normal(D).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((D, 8)).astype(np.float32) * 0.2, "W2"),
    ]
    nodes = [
        helper.make_node("Relu", ["x_in"], ["x"]),
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["proj"]),
        helper.make_node("Add", ["x", "proj"], ["y"]),
        helper.make_node("MatMul", ["x", "W2"], ["z"]),
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z", "x")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x_in", TensorProto.FLOAT, ["n", D])], outputs, inits
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_projections_fused_with_bias_and_residuals_stay_float(tmp_path):
    rng = np.random.default_rng(0)
    src = tmp_path / "float.onnx"
    _float_model(src, rng)
    feeds = [{"x_in": rng.standard_normal((16, D)).astype(np.float32)} for _ in range(8)]
    fused = quantize_int8_static(src, tmp_path / "int8.onnx", feeds)
    model = onnx.load(str(fused))
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["MatMulIntegerToFloat"] == 2 and ops["MatMul"] == 0 and ops["DequantizeLinear"] == 0
    with_bias = [n for n in model.graph.node if n.op_type == "MatMulIntegerToFloat" and n.input[6]]
    assert [n.input[6] for n in with_bias] == ["b"]  # the bias Add went into the GEMM
    producer = {out: n.op_type for n in model.graph.node for out in n.output}
    residual = next(n for n in model.graph.node if n.op_type == "Add")
    assert sorted(producer[i] for i in residual.input) == ["MatMulIntegerToFloat", "Relu"]  # float x, not rounded

    x = rng.standard_normal((64, D)).astype(np.float32)
    run = {p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (src, fused)}
    want_y, want_z, want_x = run[src].run(None, {"x_in": x})
    y, z, x_out = run[fused].run(None, {"x_in": x})
    np.testing.assert_array_equal(x_out, want_x)  # a float graph output stays exact
    assert np.abs(y - want_y).max() < 0.05 and np.abs(z - want_z).max() < 0.05  # int8 error, small


def test_tiny_bundle_int8_graphs_are_fully_fused(tiny_bundle_dir):
    bundle = load_bundle(tiny_bundle_dir)
    for graph in ("encoder", "decoder", "decoder_step"):
        fp32 = onnx.load(str(bundle.graph("fp32", graph)))
        int8 = onnx.load(str(bundle.graph("int8", graph)))
        constants = weight_names(fp32)  # initializers, and the weights a packed graph derives from them
        projections = [n for n in fp32.graph.node if n.op_type == "MatMul" and n.input[1] in constants]
        ops = Counter(n.op_type for n in int8.graph.node)
        assert ops["MatMulIntegerToFloat"] == len(projections) > 0, graph
        assert ops["DequantizeLinear"] == 0, graph
