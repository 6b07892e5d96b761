"""A bundle's int8 whole-batch step graph rewritten as one fused operator node (native/fused_step/fused_step_op.c).

``fused_step_graph(path)`` reads ``int8.decoder_step_batch.onnx`` (core/graphs.py BATCH_STEP: interface 3, with
``vocab_ids``) from the protobuf wire format (serving installs no ``onnx`` package) and returns the bytes of a model
with the same inputs, outputs and initializers (the same external weight regions: nothing is copied), whose nodes are
the few that derive weights from stored ones (the Q|K|V Concats, which onnxruntime folds at load) and one
``mtserve.fused.FusedDecoderStep`` node computing the rest. Its input order is the operator's contract (the C file's
header). The weights are found by the exporter's names (export/pack.py) and the structure is checked against the
one the operator computes (engine/fused_step_layout.py: pre-norm or post-norm layers, a ReLU, swish or GELU FFN, an
output bias, banned ids; the node's attributes say which), vanilla attention, static u8 activations, symmetric int8
weights. Anything else raises ``NotFused`` with the reason, and the engine keeps the graph as it is.
"""

from __future__ import annotations

import struct
from pathlib import Path

from core.graphs import (
    BATCH_STEP_INTERFACE,
    FUSED_STEP_KEY,
    NO_REPEAT_NGRAM,
    SEARCH_LOOP_OUTPUTS,
    SOURCE_LIMITS,
    SOURCE_STEPS,
    VOCAB_IDS,
    VOCAB_SOURCES,
    step_input_names,
    step_interface,
    step_output_names,
)
from core.onnx_wire import (
    Node,
    Tensor,
    attribute,
    encode_varint,
    fields,
    initializers,
    nodes,
    raw_fields,
    string,
    varint,
)
from core.tokenizer import EOS_ID
from engine.fused_step_layout import BANNED, LAYOUT_ATTRIBUTES, NotFused, StepLayout, step_layout

DOMAIN = "mtserve.fused"
OP_TYPE = "FusedDecoderStep"
EMBEDDING = "tokens.embedding"
FLOAT, FLOAT16 = 1, 10  # TensorProto.DataType: a Cast's `to`, a stored table's type
SEARCH_OP_TYPE = "FusedSearch"
HEAD_INPUTS = ["tokens", "src_mask", "top_k", "positions", "self_mask", "query_rows", "row_slots"]
# the op types the rewritten graph may hold besides the fused computation's (anything else: a model the operator
# does not compute, e.g. relative positions, linear attention)
EXPECTED_OPS = {
    "QuantizeLinear", "MatMulIntegerToFloat", "Concat", "Add", "LayerNormalization", "Reshape", "Gather",
    "MultiHeadAttention", "Split", "Relu", "Cast", "Mul", "Transpose", "Size", "Equal", "If",
    "LogSoftmax", "TopK", "ReduceMax", "Unsqueeze", "GatherND", "GatherElements", "Div", "Mod", "Sigmoid", "Gelu",
}  # fmt: skip
NO_VOCAB_IDS = "fused.no_vocab_ids"  # the empty vocab_ids of graphs that take none
NO_VOCAB_SOURCES = "fused.no_vocab_sources"  # the empty vocab_sources of a search loop's body (one source)
NORMS = ["self.norm", "cross.norm", "ffn.norm"]


# why a graph is not for the fused step at all (the fp32 and fp16 variants): engine/fused_step.py logs it at DEBUG
NOT_COMPUTED = "ops the fused step does not compute"


def _all_zero(tensor: Tensor, folder: Path) -> bool:
    if tensor.external is None and tensor.raw is None:
        return not any(tensor.ints)
    return not any(_tensor_bytes(tensor, folder))


def _tensor_bytes(tensor: Tensor, folder: Path) -> bytes:
    if tensor.external is not None:
        offset, length = int(tensor.external.get("offset", 0)), int(tensor.external["length"])
        with open(folder / tensor.external["location"], "rb") as f:
            f.seek(offset)
            return f.read(length)
    if tensor.raw is None:
        raise NotFused(f"initializer {tensor.name} is not stored as raw bytes")
    return tensor.raw


# --- protobuf encoding (the few messages the rewrite writes) ---------------------------------------------------------


def _key(number: int, wire: int) -> bytes:
    return encode_varint(number << 3 | wire)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + encode_varint(len(payload)) + payload


def _node_bytes(op_type: str, inputs: list[str], outputs: list[str], domain: str = "", **attributes) -> bytes:
    body = b"".join(_length_delimited(1, name.encode()) for name in inputs)
    body += b"".join(_length_delimited(2, name.encode()) for name in outputs)
    body += _length_delimited(4, op_type.encode())
    if domain:
        body += _length_delimited(7, domain.encode())
    for name, value in attributes.items():
        attr = _length_delimited(1, name.encode())
        if isinstance(value, float):
            attr += _key(2, 5) + struct.pack("<f", value) + _key(20, 0) + encode_varint(1)  # FLOAT
        else:
            attr += _key(3, 0) + encode_varint(int(value)) + _key(20, 0) + encode_varint(2)  # INT
        body += _length_delimited(5, attr)
    return _length_delimited(1, body)


# --- the rewrite -----------------------------------------------------------------------------------------------------


def _empty_ids(name: str) -> bytes:
    """An initializer (graph field 5): an empty int64 vector (TensorProto dims 1, data_type 2 = 7, name 8)."""
    return _length_delimited(
        5, _key(1, 0) + encode_varint(0) + _key(2, 0) + encode_varint(7) + _length_delimited(8, name.encode())
    )


def _empty_bools(name: str) -> bytes:
    """An initializer: an empty (0, 0) bool matrix (TensorProto dims 1, data_type 2 = 9, name 8)."""
    dims = (_key(1, 0) + encode_varint(0)) * 2
    return _length_delimited(5, dims + _key(2, 0) + encode_varint(9) + _length_delimited(8, name.encode()))


def _bools_value(name: str, dims: tuple[str, str]) -> bytes:
    """A ValueInfoProto: ``name``, a bool tensor of shape ``dims`` (tensor_type elem_type 9, named dims)."""
    shape = b"".join(_length_delimited(1, _length_delimited(2, dim.encode())) for dim in dims)
    tensor_type = _key(1, 0) + encode_varint(9) + _length_delimited(2, shape)
    return _length_delimited(1, name.encode()) + _length_delimited(2, _length_delimited(1, tensor_type))


def _vocab_sources_input() -> bytes:
    """``vocab_sources`` as a graph input with an empty default (an overridable initializer: callers may leave it
    out, and every row then normalizes over the whole subset)."""
    return _length_delimited(11, _bools_value(VOCAB_SOURCES, ("sources", "subset"))) + _empty_bools(VOCAB_SOURCES)


def _int64_value(name: str, dim: str | None) -> bytes:
    """A ValueInfoProto: ``name``, an int64 tensor of shape (dim,), or a scalar for None (type 2: tensor_type 1:
    elem_type 1 = 7, shape 2: dim 1: dim_param 2)."""
    shape = _length_delimited(1, _length_delimited(2, dim.encode())) if dim else b""
    tensor_type = _key(1, 0) + encode_varint(7) + _length_delimited(2, shape)
    return _length_delimited(1, name.encode()) + _length_delimited(2, _length_delimited(1, tensor_type))


def _product_inputs(products: dict[str, Node], weight: str, with_bias: bool) -> list[str]:
    node = products.get(weight)
    if node is None:
        raise NotFused(f"no MatMulIntegerToFloat reads {weight}")
    a, b, a_scale, b_scale, a_zero, b_zero = node.inputs[:6]
    bias = node.inputs[6] if len(node.inputs) > 6 else ""
    if with_bias != bool(bias):
        raise NotFused(f"the product of {weight} {'lacks' if with_bias else 'has'} a bias")
    return [b, b_scale, a_scale, a_zero] + ([bias] if with_bias else [])


def _needs(node: Node) -> set[str]:
    """The names a node reads: its inputs and, for an If or Loop, what its subgraphs read from outside them."""
    names = {name for name in node.inputs if name}
    for sub in node.subgraph_nodes():
        made = {out for n in sub for out in n.outputs}
        names |= {name for n in sub for name in _needs(n)} - made
    return names


def _raw_nodes(graph: bytes) -> list[tuple[Node, bytes]]:
    """Each node of a graph with its whole field encoding (to copy it unchanged)."""
    raws = [field_bytes for number, field_bytes in raw_fields(graph) if number == 1]
    return list(zip(nodes(graph), raws, strict=True))


def _topological(nodes: list[tuple[list[str], list[str], bytes]]) -> bytes:
    """Nodes (needs, outputs, bytes) in an order where each comes after the producers of what it reads (the given
    order where it allows)."""
    made_by = {out: i for i, (_, outs, _) in enumerate(nodes) for out in outs}
    done: set[int] = set()
    out = b""
    while len(done) < len(nodes):
        ready = next(
            i
            for i, (needs, _, _) in enumerate(nodes)
            if i not in done and all(name not in made_by or made_by[name] in done for name in needs)
        )
        done.add(ready)
        out += nodes[ready][2]
    return out


def _cache_inputs(layers: int) -> list[str]:
    """The fused operators' cache inputs, in their order: each layer's cross keys and values, then its past ones."""
    cache = [f"{kind}_{i}" for i in range(layers) for kind in ("cross_keys", "cross_values")]
    return cache + [f"{kind}_{i}" for i in range(layers) for kind in ("past_keys", "past_values")]


def _step_closure(
    raw_nodes: list, producer: dict[str, int], step_inputs: list[str], step_outputs: list[str]
) -> set[int]:
    """The nodes that compute the step outputs from the step inputs (indices into ``raw_nodes``)."""
    closure: set[int] = set()
    stack = list(step_outputs)
    while stack:
        name = stack.pop()
        at = producer.get(name)
        if name in step_inputs or at is None or at in closure:
            continue
        closure.add(at)
        stack += sorted(_needs(raw_nodes[at][0]))
    return closure


def _weights(products: dict, layers: int, layout: StepLayout) -> list[str]:
    """The fused node's weight inputs after the step inputs, in the operator's order (native/fused_step/): post-norm
    layers have no final norm; the output bias and the banned ids follow the output product where the graph has
    them."""
    weights = [EMBEDDING, "tokens.scale", "tokens.positions"]
    for i in range(layers):
        p = f"decoder.{i}."
        norm = [p + NORMS[0] + ".gamma", p + NORMS[0] + ".beta"]
        weights += norm + _product_inputs(products, p + "self.qkv.weight_quantized", False) + [p + "self.qkv.bias"]
        weights += _product_inputs(products, p + "self.out.weight_quantized", True)
        weights += [p + NORMS[1] + ".gamma", p + NORMS[1] + ".beta"]
        weights += _product_inputs(products, p + "cross.q.weight_quantized", True)
        weights += _product_inputs(products, p + "cross.out.weight_quantized", True)
        weights += [p + NORMS[2] + ".gamma", p + NORMS[2] + ".beta"]
        weights += _product_inputs(products, p + "ffn.w1.weight_quantized", True)
        weights += _product_inputs(products, p + "ffn.w2.weight_quantized", True)
    if not layout.post_norm:
        weights += ["decoder.final_norm.gamma", "decoder.final_norm.beta"]
    weights += _product_inputs(products, "output.weight_quantized", layout.output_bias)
    return weights + ([BANNED] if layout.banned else [])


def _stored_half(name: str, tensors: dict, producer: dict, raw_nodes: list, closure: set[int]) -> str:
    """The embedding table as the bundle stores it, where the graph reads it as a Cast of a float16 initializer
    (float16 storage, export/pack.py) that only the step reads: the operator converts the rows it gathers
    (native/fused_step/), and the session then holds no float32 copy of the table (a folded Cast is memory the session
    owns; a stored table is mapped from its weights file, and only the pages of the rows used are read)."""
    at = producer.get(name)
    if name != EMBEDDING or name in tensors or at is None:
        return name
    node = raw_nodes[at][0]
    source = node.inputs[0] if node.inputs else ""
    stored = tensors.get(source)
    if node.op_type != "Cast" or node.attributes.get("to") != FLOAT or stored is None or stored.data_type != FLOAT16:
        return name
    read_outside = any(name in _needs(n) for i, (n, _) in enumerate(raw_nodes) if i not in closure)
    return name if read_outside else source


def _fuse(
    graph: bytes, folder: Path, outer: dict[str, Tensor], layers: int, has_vocab_ids: bool, sources: bool
) -> bytes:
    """A graph (a step graph, or the body of a search loop) with its step computation, from the step inputs to the
    step outputs, replaced by one fused node; the rest of its nodes unchanged. ``sources``: the graph takes
    ``vocab_sources`` (a step graph of whole batches; a loop's body searches one source and gets an empty one)."""
    raw_nodes = _raw_nodes(graph)
    tensors = {**outer, **initializers(graph)}
    step_inputs = HEAD_INPUTS + _cache_inputs(layers) + ([VOCAB_IDS] if has_vocab_ids else [])
    step_outputs = step_output_names(layers)
    producer = {out: i for i, (node, _) in enumerate(raw_nodes) for out in node.outputs}
    missing = [name for name in step_outputs if name not in producer]
    if missing:
        raise NotFused(f"no node computes {missing}")
    closure = _step_closure(raw_nodes, producer, step_inputs, step_outputs)
    step_nodes = [raw_nodes[i][0] for i in sorted(closure)]

    unexpected = {n.op_type for n in step_nodes} - EXPECTED_OPS
    if unexpected:
        raise NotFused(f"{NOT_COMPUTED}: {sorted(unexpected)}")
    every = step_nodes + [n for node in step_nodes for sub in node.subgraph_nodes() for n in sub]
    if sum(n.op_type == "MultiHeadAttention" for n in step_nodes) != 2 * layers:
        raise NotFused("not two attentions per layer")
    heads = {n.attributes.get("num_heads") for n in step_nodes if n.op_type == "MultiHeadAttention"}
    eps = {n.attributes.get("epsilon", 1e-5) for n in step_nodes if n.op_type == "LayerNormalization"}
    if len(heads) != 1 or len(eps) != 1 or None in heads:
        raise NotFused("attentions or norms differ between layers")
    products = {n.inputs[1]: n for n in every if n.op_type == "MatMulIntegerToFloat"}
    layout = step_layout(every, products, layers)
    weights = [_stored_half(w, tensors, producer, raw_nodes, closure) for w in _weights(products, layers, layout)]

    # weights the kept nodes derive (Concat of the Q|K|V parts, Cast of float16-stored ones: export/pack.py), and
    # the check that every weight is there
    kept: set[int] = set()
    needed = list(weights)
    while needed:
        name = needed.pop()
        if name in tensors:
            continue
        at = producer.get(name)
        if at is None or raw_nodes[at][0].op_type not in ("Concat", "Cast"):
            raise NotFused(f"weight {name} is neither stored nor a Concat or Cast of stored ones")
        if at not in kept:
            kept.add(at)
            needed += raw_nodes[at][0].inputs
    # symmetric weights: every weight zero point of the products is zero
    for node in (products[w] for w in weights if w in products):
        zero = node.inputs[5]
        parts = raw_nodes[producer[zero]][0].inputs if zero in producer else [zero]
        if any(p not in tensors or not _all_zero(tensors[p], folder) for p in parts):
            raise NotFused(f"weight zero point {zero} is not zero")

    own = VOCAB_SOURCES if sources else NO_VOCAB_SOURCES
    fused = _node_bytes(
        OP_TYPE,
        (step_inputs if has_vocab_ids else step_inputs + [NO_VOCAB_IDS]) + [own] + weights,
        step_outputs,
        DOMAIN,
        layers=layers,
        heads=int(heads.pop()),
        epsilon=float(eps.pop()),
        **layout.attributes(),
    )
    order = [
        (sorted(_needs(node)), node.outputs, raw)
        for i, (node, raw) in enumerate(raw_nodes)
        if i not in closure or i in kept
    ]
    order.append((step_inputs + weights, step_outputs, fused))
    rest = b"".join(field_bytes for number, field_bytes in raw_fields(graph) if number not in (1, 13))
    # graphs without vocab_ids (bundles without a shortlist) give the operator an empty one: the whole vocabulary
    empty = b"" if has_vocab_ids else _empty_ids(NO_VOCAB_IDS)
    return _topological(order) + rest + empty + (_vocab_sources_input() if sources else _empty_bools(own))


def _model_parts(path: Path) -> tuple[bytes, bytes, list[str], dict[str, str]]:
    model = Path(path).read_bytes()
    graph = next((v for n, v in fields(model) if n == 7), None)
    if graph is None:
        raise NotFused("no graph")
    inputs = [string(dict(fields(v)).get(1, b"")) for n, v in fields(graph) if n == 11]
    metadata = {}
    for number, value in fields(model):
        if number == 14:
            entry = dict(fields(value))
            metadata[string(entry.get(1, b""))] = string(entry.get(2, b""))
    return model, graph, inputs, metadata


def _with_graph(model: bytes, graph: bytes) -> bytes:
    """The model with its graph replaced, the fused operator's domain imported and FUSED_STEP_KEY in its metadata."""
    out = b"".join(
        _length_delimited(7, graph) if number == 7 else field_bytes for number, field_bytes in raw_fields(model)
    )
    out += _length_delimited(8, _length_delimited(1, DOMAIN.encode()) + _key(2, 0) + encode_varint(1))
    return out + _length_delimited(14, _length_delimited(1, FUSED_STEP_KEY.encode()) + _length_delimited(2, b"1"))


def fused_step_graph(path: Path) -> bytes:
    """The fused model's bytes for the int8 whole-batch step graph file ``path`` (raises NotFused)."""
    model, graph, inputs, metadata = _model_parts(path)
    if step_interface(metadata) != BATCH_STEP_INTERFACE:
        raise NotFused(f"step interface {step_interface(metadata)}, the fused step computes {BATCH_STEP_INTERFACE}")
    layers = sum(name.startswith("cross_keys_") for name in inputs)
    base = step_input_names(layers, BATCH_STEP_INTERFACE)
    if layers == 0 or inputs not in (base, base + [VOCAB_IDS]):
        raise NotFused(f"not an interface-3 step graph (inputs {inputs})")
    return _with_graph(model, _fuse(graph, Path(path).parent, {}, layers, VOCAB_IDS in inputs, sources=True))


def _search_loop_parts(path: Path) -> tuple[bytes, bytes, list[str], int, list[tuple[Node, bytes]], int]:
    """A search loop graph file's model, graph, input names, decoder layers, nodes (with their encodings) and the
    index of its one Loop node; NotFused when it is not one."""
    model, graph, inputs, _ = _model_parts(path)
    layers = sum(name.startswith("cross_keys_") for name in inputs)
    raw_nodes = _raw_nodes(graph)
    loops = [i for i, (node, _) in enumerate(raw_nodes) if node.op_type == "Loop"]
    if layers == 0 or len(loops) != 1:
        raise NotFused("not a search loop graph (one Loop node over a step graph)")
    return model, graph, inputs, layers, raw_nodes, loops[0]


def fused_loop_graph(path: Path) -> bytes:
    """The fused model's bytes for a search loop graph file ``path`` (core/graphs.py SEARCH_LOOP) whose body is an
    int8 interface-3 step graph: the Loop's body with its step fused, the outer graph's subset gathers for the
    body's old output projection dropped (the operator packs the subset's columns itself). Raises NotFused."""
    model, graph, inputs, layers, raw_nodes, at = _search_loop_parts(path)
    rebuilt = b""
    for number, field_bytes in raw_fields(_unwrap(raw_nodes[at][1])):
        if number == 5 and attribute(_unwrap(field_bytes))[0] == "body":
            body = next(v for n, v in fields(_unwrap(field_bytes)) if n == 6)
            new_body = _fuse(body, Path(path).parent, initializers(graph), layers, VOCAB_IDS in inputs, sources=False)
            body_attribute = b"".join(
                _length_delimited(6, new_body) if n == 6 else raw for n, raw in raw_fields(_unwrap(field_bytes))
            )
            rebuilt += _length_delimited(5, body_attribute)
        else:
            rebuilt += field_bytes
    fused_loop = _length_delimited(1, rebuilt)  # the Loop node, its body replaced
    # the outer nodes nothing reads any more (the hoisted subset gathers), dropped
    kept = list(raw_nodes)
    kept[at] = (nodes(fused_loop)[0], fused_loop)
    outputs = {string(dict(fields(v)).get(1, b"")) for n, v in fields(graph) if n == 12}
    while True:
        read = outputs | {name for node, _ in kept for name in _needs(node)}
        alive = [(node, raw) for node, raw in kept if any(out in read for out in node.outputs)]
        if len(alive) == len(kept):
            break
        kept = alive
    rest = b"".join(field_bytes for number, field_bytes in raw_fields(graph) if number not in (1, 13))
    return _with_graph(model, b"".join(raw for _, raw in kept) + rest)


def fused_search_graph(path: Path) -> bytes:
    """The model's bytes for a search loop graph file ``path`` whose body is an int8 interface-3 step graph, with
    its Loop replaced by one ``mtserve.fused.FusedSearch`` node that searches a batch of sources: the loop graph's
    inputs and outputs (SEARCH_LOOP_OUTPUTS) for sources * k rows, plus SOURCE_LIMITS, NO_REPEAT_NGRAM and
    SOURCE_STEPS (core/graphs.py); the body's step fused and its ranking done in the operator over a key/value
    cache written in place. Its nodes are that node and the weight-deriving Concats the fused body keeps; its
    initializers the body's weights they read (the same external regions). Raises NotFused."""
    model, graph, inputs, layers, raw_nodes, at = _search_loop_parts(path)
    body_attribute = next(
        _unwrap(f) for n, f in raw_fields(_unwrap(raw_nodes[at][1])) if n == 5 and attribute(_unwrap(f))[0] == "body"
    )
    body = next(v for n, v in fields(body_attribute) if n == 6)
    has_vocab_ids = VOCAB_IDS in inputs
    fused_body = _fuse(body, Path(path).parent, initializers(graph), layers, has_vocab_ids, sources=False)
    body_nodes = _raw_nodes(fused_body)
    step = next(node for node, _ in body_nodes if node.op_type == OP_TYPE)
    weights = step.inputs[len(HEAD_INPUTS) + 4 * layers + 2 :]
    # the body's weight-deriving nodes (Concats of stored weights) and the stored weights everything reads
    producer = {out: (node, raw) for node, raw in body_nodes for out in node.outputs}
    kept: list[tuple[Node, bytes]] = []
    read: set[str] = set()
    needed = list(weights)
    while needed:
        name = needed.pop()
        if name in read:
            continue
        read.add(name)
        if name in producer and all(producer[name][0] is not node for node, _ in kept):
            kept.append(producer[name])
            needed += producer[name][0].inputs
    stored = [
        f
        for scope in (graph, fused_body)
        for n, f in raw_fields(scope)
        if n == 5 and string(dict(fields(_unwrap(f))).get(8, b"")) in read
    ]
    search_inputs = ["max_steps", "tokens", "scores", "src_mask", SOURCE_LIMITS, NO_REPEAT_NGRAM]
    search_inputs += _cache_inputs(layers)
    search_inputs += [VOCAB_IDS if has_vocab_ids else NO_VOCAB_IDS, VOCAB_SOURCES]
    outputs = [*SEARCH_LOOP_OUTPUTS, SOURCE_STEPS]
    search = _node_bytes(
        SEARCH_OP_TYPE,
        search_inputs + weights,
        outputs,
        DOMAIN,
        layers=layers,
        heads=int(step.attributes["heads"]),
        epsilon=float(step.attributes["epsilon"]),
        eos=EOS_ID,
        **{name: int(step.attributes[name]) for name in LAYOUT_ATTRIBUTES if name in step.attributes},
    )
    order = [(sorted(_needs(node)), node.outputs, raw) for node, raw in kept]
    order.append((search_inputs + weights, outputs, search))
    rest = b"".join(f for number, f in raw_fields(graph) if number in (2, 11, 12))
    rest += _length_delimited(11, _int64_value(SOURCE_LIMITS, "sources"))
    rest += _length_delimited(11, _int64_value(NO_REPEAT_NGRAM, None))
    rest += _length_delimited(12, _int64_value(SOURCE_STEPS, "sources"))
    empty = b"" if has_vocab_ids else _empty_ids(NO_VOCAB_IDS)
    return _with_graph(model, _topological(order) + rest + b"".join(stored) + empty + _vocab_sources_input())


def _unwrap(field_bytes: bytes) -> bytes:
    """The payload of one length-delimited field's encoding."""
    _, i = varint(field_bytes, 0)
    _, i = varint(field_bytes, i)
    return field_bytes[i:]
