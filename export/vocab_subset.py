"""A decoder-step graph that can project onto a subset of the vocabulary (the lexical shortlist, issue 33).

The output projection over the whole vocabulary is the largest product of a step (42% of its FLOPs on de-en v2, 8,000
ids). ``add_vocab_subset`` rewrites a step graph (fp32, int8 or fp16; interface 3 or 4; weights inside the graph or
in the bundle's weights files) so that it takes one more input, ``vocab_ids`` (subset,) int64, ascending:
- empty: the graph computes exactly what it computed before (an ``If`` runs the original nodes, unchanged);
- not empty: the projection's weight columns (and bias, and the int8 per-channel scales and zero points) of those
  ids are gathered at each step (rows of the (vocab, d) layout: ``_rows_of``) and only they are multiplied;
  ``log_probs`` is then (rows, subset), normalized over the subset (as Marian's and CTranslate2's shortlists do),
  column j being id ``vocab_ids[j]``; ``top_ids`` are vocabulary ids (mapped back in the graph), ``top_log_probs``
  best first, ties to the lower id (TopK keeps the lower index among ties, and the subset is ascending).
  Gathering rows costs a few memory copies per step, cheaper than the columns it saves from 2 rows up; the int8
  projection, with prepacked weights, gains less (docs/engine-speed-log.md).
The weights files are not touched: the rewritten graph reads the same initializers, so a bundle's weights stay shared.
The graph metadata gains ``VOCAB_SUBSET_KEY`` (core/graphs.py); the engine feeds ``vocab_ids`` when the input exists.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from core.graphs import VOCAB_IDS, VOCAB_SUBSET_KEY

TAIL_OUTPUTS = ("log_probs", "top_log_probs", "top_ids")


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output}


def _log_softmax(graph: onnx.GraphProto) -> tuple[onnx.NodeProto, bool]:
    """The LogSoftmax that makes ``log_probs``, and whether a Cast to float32 stands between them (fp16 graphs keep
    float32 outputs: export.quantize.convert_fp16_step)."""
    producer = _producers(graph)
    node = producer["log_probs"]
    cast = node.op_type == "Cast" and node.input[0] in producer
    if cast:
        node = producer[node.input[0]]
    if node.op_type != "LogSoftmax":
        made = f"a Cast of {node.op_type}" if cast else node.op_type
        raise ValueError(f"log_probs is made by {made}, not LogSoftmax: not a decoder_step graph")
    return node, cast


def _projection(graph: onnx.GraphProto) -> onnx.NodeProto:
    """The node whose output LogSoftmax normalizes into ``log_probs`` (MatMul, Add of a bias, MatMulIntegerToFloat)."""
    producer = _producers(graph)
    log_softmax, _ = _log_softmax(graph)
    if log_softmax.op_type != "LogSoftmax":
        raise ValueError(f"log_probs is made by {log_softmax.op_type}, not LogSoftmax: not a decoder_step graph")
    return producer[log_softmax.input[0]]


def _rows_of(graph: onnx.GraphProto, weight: str, nodes: list[onnx.NodeProto], extra: list[onnx.NodeProto]) -> str:
    """The (vocab, d) layout of a (d, vocab) projection ``weight``: the initializer it was transposed from (tied
    embeddings in a packed bundle), else a Transpose node in the main graph (``extra``), which onnxruntime folds
    into a constant when the session loads. Rows of it are contiguous, so gathering the subset's rows at each step
    is a few memory copies (gathering columns of the (d, vocab) layout measured 10-100x slower)."""
    made = _producers(graph).get(weight)
    if made is not None and made.op_type == "Transpose" and list(made.attribute[0].ints) == [1, 0]:
        return made.input[0]
    rows = f"{weight}.by_id"
    extra.append(helper.make_node("Transpose", [weight], [rows], name=f"Transpose_{rows}", perm=[1, 0]))
    return rows


def _subset_projection(
    graph: onnx.GraphProto, logits: str, nodes: list[onnx.NodeProto], extra: list[onnx.NodeProto]
) -> str:
    """Nodes (appended to ``nodes``; constants to fold into ``extra``) computing the projection's columns
    ``vocab_ids`` into a new value; returns its name."""
    producer = _producers(graph)
    last = producer[logits]

    def gather(name: str, axis: int = 0) -> str:
        out = f"subset.{name}"
        nodes.append(helper.make_node("Gather", [name, VOCAB_IDS], [out], name=f"Gather_{out}", axis=axis))
        return out

    bias = ""
    if last.op_type == "Add":  # MatMul + bias (fp32, fp16)
        matmul_out, bias = last.input
        if producer.get(matmul_out) is None or producer[matmul_out].op_type != "MatMul":
            matmul_out, bias = bias, matmul_out
        last = producer[matmul_out]
        bias = gather(bias)
    out = "subset.logits"
    if last.op_type == "MatMul":  # x (rows, d) @ W (d, vocab): Gemm of x and the subset's rows of W^T
        x, w = last.input
        rows = gather(_rows_of(graph, w, nodes, extra))
        gemm_inputs = [x, rows, *([bias] if bias else [])]
        nodes.append(helper.make_node("Gemm", gemm_inputs, [out], name="Gemm_subset", transB=1))
        return out
    if last.op_type == "MatMulIntegerToFloat":  # int8: x_q, W_q, x_scale, W_scale, x_zero, W_zero, bias
        x_q, w_q, x_scale, w_scale, x_zero, w_zero, q_bias = list(last.input) + [""] * (7 - len(last.input))
        rows = gather(_rows_of(graph, w_q, nodes, extra))  # (subset, d) int8
        columns = "subset.weight_quantized"
        nodes.append(helper.make_node("Transpose", [rows], [columns], name="Transpose_subset", perm=[1, 0]))
        inputs = [x_q, columns, x_scale, gather(w_scale), x_zero, gather(w_zero) if w_zero else ""]
        inputs.append(gather(q_bias) if q_bias else "")
        nodes.append(
            helper.make_node(
                "MatMulIntegerToFloat", inputs, [out], name="MatMulIntegerToFloat_subset", domain="com.microsoft"
            )
        )
        return out
    raise ValueError(f"unexpected output projection {last.op_type}")


def _tail(graph: onnx.GraphProto, start: onnx.NodeProto) -> list[onnx.NodeProto]:
    """``start`` and every node that reads (directly or not) what it makes, in graph order."""
    reached = set(start.output)
    tail = []
    for node in graph.node:
        if node is start or any(name in reached for name in node.input):
            tail.append(node)
            reached.update(node.output)
    return tail


def add_vocab_subset(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite ``model`` (a decoder_step graph) in place to take ``vocab_ids`` (module docstring); returns it."""
    graph = model.graph
    if any(i.name == VOCAB_IDS for i in graph.input):
        raise ValueError("the graph already takes vocab_ids")
    projection = _projection(graph)
    # the projection's first node: with a bias Add, the MatMul before it
    producer = _producers(graph)
    first = projection
    if projection.op_type == "Add":
        first = next(producer[n] for n in projection.input if n in producer and producer[n].op_type == "MatMul")
    tail = _tail(graph, first)
    logits = projection.output[0]

    full = graph.__class__()
    full.name = "full_vocabulary"
    for node in tail:
        copy = full.node.add()
        copy.CopyFrom(node)
    renamed = {name: f"full.{name}" for name in TAIL_OUTPUTS}
    for node in full.node:
        node.output[:] = [renamed.get(o, o) for o in node.output]
        node.input[:] = [renamed.get(i, i) for i in node.input]
    outputs = {o.name: o for o in graph.output}
    for name in TAIL_OUTPUTS:
        typed = helper.make_tensor_value_info(renamed[name], outputs[name].type.tensor_type.elem_type, None)
        full.output.append(typed)

    subset_nodes: list[onnx.NodeProto] = []
    constants: list[onnx.NodeProto] = []
    subset_logits = _subset_projection(graph, logits, subset_nodes, constants)
    _, cast = _log_softmax(graph)
    if cast:  # fp16 inside, float32 out: normalize in fp16 as the full branch does, rank the float32 values
        subset_nodes += [
            helper.make_node("LogSoftmax", [subset_logits], ["subset.log_probs16"], name="LogSoftmax_subset", axis=-1),
            helper.make_node(
                "Cast", ["subset.log_probs16"], ["subset.log_probs"], name="Cast_subset", to=TensorProto.FLOAT
            ),
        ]
    else:
        subset_nodes.append(
            helper.make_node("LogSoftmax", [subset_logits], ["subset.log_probs"], name="LogSoftmax_subset", axis=-1)
        )
    subset_nodes += [
        helper.make_node("TopK", ["subset.log_probs", "top_k"], ["subset.top_log_probs", "subset.top_at"], axis=-1),
        helper.make_node("Gather", [VOCAB_IDS, "subset.top_at"], ["subset.top_ids"], name="Gather_subset_ids"),
    ]
    subset = helper.make_graph(
        subset_nodes,
        "vocabulary_subset",
        [],
        [
            helper.make_tensor_value_info(f"subset.{name}", outputs[name].type.tensor_type.elem_type, None)
            for name in TAIL_OUTPUTS
        ],
    )

    tail_ids = {id(n) for n in tail}
    kept = [n for n in graph.node if id(n) not in tail_ids]
    size = helper.make_node("Size", [VOCAB_IDS], ["vocab_ids.size"], name="Size_vocab_ids")
    zero = helper.make_tensor("vocab_ids.zero", TensorProto.INT64, [], [0])
    graph.initializer.append(zero)
    empty = helper.make_node("Equal", ["vocab_ids.size", "vocab_ids.zero"], ["vocab_ids.empty"], name="Equal_empty")
    branch = helper.make_node(
        "If", ["vocab_ids.empty"], list(TAIL_OUTPUTS), name="If_vocab_subset", then_branch=full, else_branch=subset
    )
    del graph.node[:]
    graph.node.extend([*kept, *constants, size, empty, branch])
    graph.input.append(helper.make_tensor_value_info(VOCAB_IDS, TensorProto.INT64, ["subset"]))
    # the outputs' vocabulary axis is the subset's size when one is fed
    for out in graph.output:
        if out.name == "log_probs":
            out.type.tensor_type.shape.dim[1].dim_param = "vocab_or_subset"
    stale = set(TAIL_OUTPUTS) | {o for n in tail for o in n.output}
    kept_info = [v for v in graph.value_info if v.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props}, VOCAB_SUBSET_KEY: "1"})
    return model


def takes_vocab_ids(model: onnx.ModelProto) -> bool:
    return any(i.name == VOCAB_IDS for i in model.graph.input)
