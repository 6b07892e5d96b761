"""Rewrite of a static QDQ graph: one ``MatMulIntegerToFloat`` per quantized projection, bias included, and
float (not quantized-dequantized) values for everything that is not a projection input.

``quantize_static`` (QDQ format) leaves ``x -> QuantizeLinear -> DequantizeLinear -> {MatMul, Add, ...}`` and
``MatMul -> Add(bias)``. onnxruntime fuses the MatMul part at load, but not the bias Add, and the other consumers
of the DequantizeLinear (the residual Add after a LayerNorm) read the rounded value: extra nodes per step and
quantization error in the residual stream. Here every such MatMul becomes
``MatMulIntegerToFloat(x_q, W_q, x_scale, W_scale, x_zero, W_zero, bias)`` (com.microsoft, CPU kernel with the bias
added in the GEMM's output pass) and the other consumers read ``x`` itself.
"""

from __future__ import annotations

from collections import defaultdict

import onnx
from onnx import helper

MS_DOMAIN = "com.microsoft"


def fuse_quantized_matmuls(model: onnx.ModelProto) -> int:
    """Rewrite ``model`` in place; returns the number of MatMuls replaced."""
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)

    def made_by(name: str, op_type: str) -> onnx.NodeProto | None:
        node = producer.get(name)
        return node if node is not None and node.op_type == op_type else None

    outputs = {o.name for o in graph.output}
    replaced: dict[int, onnx.NodeProto] = {}  # id(MatMul) -> its MatMulIntegerToFloat
    dropped: set[int] = set()  # bias Adds folded into the MatMulIntegerToFloat
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        dq_x, dq_w = made_by(node.input[0], "DequantizeLinear"), made_by(node.input[1], "DequantizeLinear")
        if dq_x is None or dq_w is None or dq_w.input[0] not in initializers:
            continue
        q_x = made_by(dq_x.input[0], "QuantizeLinear")
        if q_x is None:
            continue
        output, bias = node.output[0], ""
        users = consumers[output]
        if len(users) == 1 and users[0].op_type == "Add" and output not in outputs:
            add = users[0]
            other = add.input[1] if add.input[0] == output else add.input[0]
            n_out = initializers[dq_w.input[0]].dims[-1]
            if other in initializers and tuple(initializers[other].dims) == (n_out,):
                output, bias = add.output[0], other
                dropped.add(id(add))
        zero_w = dq_w.input[2] if len(dq_w.input) > 2 else ""
        inputs = [dq_x.input[0], dq_w.input[0], dq_x.input[1], dq_w.input[1], dq_x.input[2], zero_w, bias]
        replaced[id(node)] = helper.make_node(
            "MatMulIntegerToFloat", inputs, [output], name=node.name, domain=MS_DOMAIN
        )

    # every other reader of a dequantized activation reads the float value it came from; a dequantized graph
    # output (encoder_output, read by /v1/embed) becomes an Identity of the float value
    identities: dict[int, onnx.NodeProto] = {}
    for dq_x in [n for n in graph.node if n.op_type == "DequantizeLinear"]:
        q_x = made_by(dq_x.input[0], "QuantizeLinear")
        if q_x is None:
            continue
        for user in consumers[dq_x.output[0]]:
            if id(user) not in replaced:
                user.input[:] = [q_x.input[0] if name == dq_x.output[0] else name for name in user.input]
        if dq_x.output[0] in outputs:
            identities[id(dq_x)] = helper.make_node("Identity", [q_x.input[0]], [dq_x.output[0]], name=dq_x.name)

    nodes = [identities.get(id(n), replaced.get(id(n), n)) for n in graph.node if id(n) not in dropped]
    used = {name for n in nodes for name in n.input} | outputs
    for op_type in ("DequantizeLinear", "QuantizeLinear"):  # readers first: a Q is unused once its DQs are gone
        nodes = [n for n in nodes if not (n.op_type == op_type and n.output[0] not in used)]
        used = {name for n in nodes for name in n.input} | outputs
    nodes = [_copy(n) for n in nodes]  # detached from the repeated field before it is cleared
    kept = [_copy(i) for i in graph.initializer if i.name in used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if replaced and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return len(replaced)


def _copy(message):
    out = type(message)()
    out.CopyFrom(message)
    return out
