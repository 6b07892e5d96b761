"""The int8 graphs' arithmetic computed exactly on any CPU: a reference for the fused operator.

onnxruntime's u8 x s8 product kernels are exact only where the CPU has AVX-512 VNNI (or AVX-VNNI, AMX): on AVX2
alone (and AVX-512 without VNNI) MLAS multiplies with ``vpmaddubsw``, which adds each pair of u8 x s8 products into
a saturating int16, so a pair above 32,767 is clipped (onnxruntime's quantization docs say so; a 256 x 64 product of
random values measured 35 off a largest value of 154 under ``qemu-x86_64 -cpu Haswell``, 9e-6 natively on VNNI).
The fused operator's kernels are exact integer sums everywhere, so on such CPUs the step graph, not the operator, is
the one that computes something else.

``exact_int8_model`` rewrites every ``MatMulIntegerToFloat(x_q, W_q, x_scale, W_scale, x_zero, W_zero, bias)`` (in
the graph and in Loop bodies) as ``MatMul(float(x_q) - float(x_zero), float(W_q) - float(W_zero)) * (x_scale *
W_scale) + bias`` in fp32: each product (at most 255 x 128) and each partial sum (below 2^24 for these widths) is an
integer that fp32 holds exactly, so sgemm gives the integer sums bit for bit and the result is the int8 model's on
every CPU, up to the last rounding of the scale and bias.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

MS_DOMAIN = "com.microsoft"


def _exact_nodes(node: onnx.NodeProto, tag: str) -> list[onnx.NodeProto]:
    """The float nodes computing one MatMulIntegerToFloat exactly, writing its output."""
    x, w, x_scale, w_scale, x_zero, w_zero, bias = list(node.input) + [""] * (7 - len(node.input))
    nodes: list[onnx.NodeProto] = []

    def centred(value: str, zero: str, role: str) -> str:  # float(value) - float(zero)
        names = [f"{tag}_{role}_f", f"{tag}_{role}_zero_f", f"{tag}_{role}_centred"]
        nodes.append(helper.make_node("Cast", [value], names[:1], to=TensorProto.FLOAT, name=names[0]))
        if not zero:
            return names[0]
        nodes.append(helper.make_node("Cast", [zero], names[1:2], to=TensorProto.FLOAT, name=names[1]))
        nodes.append(helper.make_node("Sub", names[:2], names[2:], name=names[2]))
        return names[2]

    product, multiplier, scaled = f"{tag}_product", f"{tag}_multiplier", f"{tag}_scaled" if bias else node.output[0]
    factors = [centred(x, x_zero, "x"), centred(w, w_zero, "w")]
    nodes.append(helper.make_node("MatMul", factors, [product], name=product))
    nodes.append(helper.make_node("Mul", [x_scale, w_scale], [multiplier], name=multiplier))
    nodes.append(helper.make_node("Mul", [product, multiplier], [scaled], name=f"{tag}_scale"))
    if bias:
        nodes.append(helper.make_node("Add", [scaled, bias], [node.output[0]], name=f"{tag}_bias"))
    return nodes


def _rewrite(graph: onnx.GraphProto, prefix: str) -> int:
    nodes: list[onnx.NodeProto] = []
    count = 0
    for node in graph.node:
        for attr in node.attribute:  # Loop / If bodies
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                count += _rewrite(sub, f"{prefix}{node.name}_")
        if node.op_type == "MatMulIntegerToFloat" and node.domain == MS_DOMAIN:
            count += 1
            nodes.extend(_exact_nodes(node, f"{prefix}exact{count}_{node.name}"))
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return count


def exact_int8_model(path: Path) -> bytes:
    """The graph file ``path`` with its int8 products computed exactly (above), as bytes whose external weights are
    still read from ``path``'s folder (runtime.create_session's ``model``). Refuses a graph with no int8 product."""
    model = onnx.load(str(path), load_external_data=False)
    if _rewrite(model.graph, "") == 0:
        raise ValueError(f"{path.name} has no MatMulIntegerToFloat to rewrite")
    return model.SerializeToString()
