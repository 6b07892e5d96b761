"""The lean decoder-step graph (``decoder_step.onnx``): one new token per row, no attention outputs.

Built node by node from the model's weights (export/graph_builder.py), for search only; ``decoder.onnx`` stays the
graph for attention and teacher forcing. What makes a step cheaper than with ``decoder.onnx``:
- no attention-probability outputs, and per-layer caches (``past_keys_<i>`` ... ``present_values_<i>``,
  each (rows, heads, past_len, d_head)) instead of stacked (layers, ...) tensors that every step split
  and re-stacked;
- attention through onnxruntime's fused ``com.microsoft.MultiHeadAttention`` (CPU and CUDA kernels):
  self-attention appends to the cache itself, cross-attention reads the precomputed keys/values;
- cross keys/values and ``src_mask`` have one row per *source*; the queries of a source's rows are gathered
  into one group (``query_rows``, (sources, group): 1 row for greedy, the beam for beam search, groups padded to
  the widest), so the beams of a sentence share one cross-attention call (queries (sources, group, d)) and the
  engine never repeats keys/values per beam; ``row_slots`` puts each row's output back in row order;
- one fused Q|K|V projection per self-attention; activations (rows, 1, d_model), the layout the fused
  attention reads, so no reshapes around it;
- ``log_probs`` (rows, vocab) for the new token, and ``top_log_probs`` / ``top_ids`` (rows, top_k) its
  ``top_k`` (an input, at most metadata ``mtserve.max_top_k``) best tokens, best first, ties to the lower id,
  found in two stages over chunks of the vocabulary (``add_top_k``): beam search reads only these; greedy
  asks for top_k 0 (empty, free) and takes numpy's argmax of log_probs, cheaper than TopK.
Rows at different positions share a step (interface 3 and later, continuous batching): each row has its own
``positions`` entry and attends only to the cache columns ``self_mask`` marks. Interface 4 (``write_column``) keeps
a row's real entries first in a right-padded cache and writes its new key/value at its own column (its position),
so a row's self-attention reads its entries at the columns it reads them alone and the padding only adds masked
columns after them; it attends with two copies of its query, as onnxruntime's CPU GEMM serves a single query with
its M = 1 kernel, whose sums still change with the masked columns after a row's entries, and two or more with one
whose sums do not (measured). A row's result is then bit-identical beside any rows, which the int8 graph needs: it
rounds the result to uint8 next, where a last-bit difference can become a whole step (docs/reliability.md, issue
36). Interface 3 kept the entries last in a left-padded cache (the fused self-attention appended the new key/value
after the padding), where the shift of a row's entries changes the kernels' float rounding with the rows beside it.
Names and interface version: ``core/graphs.py``; the version is stored in the model's metadata (version 1
graphs, cross keys per row, have no such entry).
Parity with PyTorch (max abs diff <= 1e-4): ``export.parity.step_max_diff``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from core.graphs import MAX_TOP_K_KEY, STEP_INTERFACE, STEP_INTERFACE_KEY, step_input_names, step_output_names
from export.graph_builder import GraphBuilder, supports_lean_graphs, weights
from model.transformer import Transformer

MAX_TOP_K = 32  # the most candidates a step is asked for: 2 x the largest beam the service allows (16)


def top_k_chunk(vocab_size: int, max_top_k: int = MAX_TOP_K) -> int:
    """Chunk size of the two-stage top-k: a divisor of the vocabulary near its square root that leaves at least
    ``max_top_k`` chunks; 0 when there is none (the graph then runs one TopK over the whole vocabulary)."""
    sizes = [c for c in range(8, vocab_size // max_top_k + 1) if vocab_size % c == 0]
    return min(sizes, key=lambda c: abs(c - vocab_size**0.5), default=0)


def add_top_k(b: GraphBuilder, log_probs: str, vocab_size: int) -> dict[str, str]:
    """``top_log_probs`` / ``top_ids``: the ``top_k`` best entries per row, best first, ties to the lower id.

    One TopK over 8000 ids costs ~1 ns per element on the CPU; in two stages it reads the vocabulary once
    (ReduceMax of chunks of C ids) and sorts only small arrays: TopK of the chunk maxima, then TopK over the
    top_k chunks' C * top_k entries. Exact: every id of the top k lies in a chunk whose maximum ranks in the
    top k chunks (ties to the lower chunk). The chosen chunks are put in id order before the second TopK, so
    ties among entries still go to the lower id. Returns metadata: the largest top_k the graph accepts.
    """
    chunk = top_k_chunk(vocab_size)
    if not chunk:
        b.nodes.append(helper.make_node("TopK", [log_probs, "top_k"], ["top_log_probs", "top_ids"], axis=-1))
        return {MAX_TOP_K_KEY: str(vocab_size)}
    size = b.ints("topk.chunk", [chunk])
    by_chunk = b.one("Reshape", [log_probs, b.ints("topk.shape_chunks", [0, vocab_size // chunk, chunk])])
    maxima = b.one("ReduceMax", [by_chunk, b.ints("topk.axis_last", [-1])], keepdims=0)  # (rows, chunks)
    _, best_chunks = b.op("TopK", [maxima, "top_k"], 2, axis=-1)  # (rows, top_k)
    chunks = b.op("TopK", [best_chunks, "top_k"], 2, axis=-1, largest=0)[0]  # the same ids, ascending
    picked = b.one("GatherND", [by_chunk, b.one("Unsqueeze", [chunks, "topk.axis_last"])], batch_dims=1)
    n_candidates = b.one("Mul", ["top_k", size])
    flat = b.one("Reshape", [picked, b.one("Concat", [b.ints("topk.keep_rows", [0]), n_candidates], axis=0)])
    b.nodes.append(helper.make_node("TopK", [flat, "top_k"], ["top_log_probs", "topk_slot"], axis=-1))
    slot, offset = b.one("Div", ["topk_slot", size]), b.one("Mod", ["topk_slot", size])
    first_id = b.one("Mul", [b.one("GatherElements", [chunks, slot], axis=1), size])
    b.nodes.append(helper.make_node("Add", [first_id, offset], ["top_ids"]))
    return {MAX_TOP_K_KEY: str(vocab_size // chunk)}


def write_columns(b: GraphBuilder) -> str:
    """Where each row's new key/value goes (interface 4): (rows, heads, 3) ScatterND indices [row, head, column], the
    column being the row's position; also the constants ``write_column`` reads (built once per graph)."""
    cfg = b.cfg
    b.ints("shape_rows_heads_dhead", [0, cfg.n_heads, cfg.d_head])
    b.ints("pads_one_column", [0, 0, 0, 0, 0, 0, 1, 0])  # a zero column after the cache
    for name, value in (("slice_first", 0), ("slice_second", 1), ("slice_axis_1", 1)):
        b.ints(name, [value])
    by_row = b.ints("shape_rows_1_1", [-1, 1, 1])
    every_head = b.const("zeros_1_heads_1", np.zeros((1, cfg.n_heads, 1), np.int64))  # broadcasts a row over heads
    at = b.one("Add", [b.one("Reshape", ["positions", by_row]), every_head])  # (rows, heads, 1): the column
    n_rows = b.one("Squeeze", [b.one("Shape", ["positions"], start=0, end=1)])
    rows = b.one(
        "Range", [b.const("int_zero", np.array(0, np.int64)), n_rows, b.const("int_one", np.array(1, np.int64))]
    )
    row = b.one("Add", [b.one("Reshape", [rows, by_row]), every_head])  # (rows, heads, 1): the row
    heads = b.const("heads_1_heads_1", np.arange(cfg.n_heads, dtype=np.int64).reshape(1, cfg.n_heads, 1))
    head = b.one("Expand", [heads, b.one("Shape", [row])])  # (rows, heads, 1): the head
    return b.one("Concat", [row, head, at], axis=2)


def write_column(b: GraphBuilder, past: str, new: str, columns: str, present: str) -> str:
    """``present`` (rows, heads, past_len + 1, d_head): ``past`` with a zero column appended and each row's ``new``
    (rows, 1, d) key or value written at its column (``write_columns``: its position) of the right-padded cache. A
    row whose position is past_len fills the appended column, as an append would; a shorter row leaves it zero.
    ScatterND writes one d_head slice per [row, head] index: 4-10x faster on onnxruntime's CPU than the
    ScatterElements (an index per element) that bundles exported before it use, for the same values
    (docs/engine-speed-log.md item 38)."""
    by_head = b.one("Reshape", [new, "shape_rows_heads_dhead"])  # (rows, heads, d_head)
    padded = b.one("Pad", [past, "pads_one_column"])
    b.nodes.append(helper.make_node("ScatterND", [padded, columns, by_head], [present]))
    return present


def supports_decoder_step(model: Transformer) -> bool:
    return supports_lean_graphs(model)


def build_decoder_step(model: Transformer, interface: int = STEP_INTERFACE) -> onnx.ModelProto:
    """The decoder-step graph of ``model`` (post- or pre-norm, sinusoidal or learned positions, any FFN).

    ``interface`` 2 and 3 build previous interfaces (2: one position for every row, rows grouped by source, the
    same number each; 3: the left-padded cache), kept so that tests and benchmarks can serve and measure bundles
    exported before the current version.
    """
    cfg = model.cfg
    if not supports_decoder_step(model):
        raise ValueError(
            "the lean decoder step implements vanilla attention with absolute positions only (not relative "
            "positions, sparse or linear attention); use decoder.onnx"
        )
    if interface not in (2, 3, 4):
        raise ValueError(f"decoder_step interfaces 2 to 4 can be built, not {interface}")
    ragged, right_padded = interface >= 3, interface >= 4
    n_layers, d = cfg.n_decoder_layers, cfg.d_model
    b = GraphBuilder(model)
    b.ints("shape_rows_d", [-1, d])
    # (sources, src) 1 = attend. A source needs one real token (the engine's always end with EOS): where all
    # are padding, PyTorch's cross-attention gives zeros, the fused kernel a uniform average
    key_mask = b.one("Cast", ["src_mask"], to=TensorProto.INT32)
    if ragged:
        # (rows, past_len + 1) 1 = attend: the row's real cache entries and the new token
        self_mask = b.one("Cast", ["self_mask"], to=TensorProto.INT32)
        x = b.embed("tokens", model.tgt_embed, "positions")  # (rows, 1, d): each row at its own position
        columns = write_columns(b) if right_padded else ""
    else:
        self_mask = columns = ""
        # queries grouped by source for cross-attention: (sources, rows_per_source, d)
        n_sources = b.one("Shape", ["src_mask"], start=0, end=1)
        by_source = b.one("Concat", [n_sources, b.ints("shape_any_d", [-1, d])], axis=0)
        position = b.one("Shape", ["past_keys_0"], start=2, end=3)  # (1,): the new token's position = past_len
        x = b.embed("tokens", model.tgt_embed, position)  # (rows, 1, d)

    for i, layer in enumerate(model.decoder_layers):
        p = f"decoder.{i}"
        sa, ca = layer.self_attn, layer.cross_attn

        def self_attention(h: str, i=i, p=p, sa=sa) -> str:
            w_qkv = np.concatenate([weights(sa.q_proj.weight), weights(sa.k_proj.weight), weights(sa.v_proj.weight)])
            b_qkv = np.concatenate([weights(sa.q_proj.bias), weights(sa.k_proj.bias), weights(sa.v_proj.bias)])
            qkv = b.one("MatMul", [h, b.const(f"{p}.self.qkv.weight", w_qkv.T)])  # (rows, 1, 3d)
            if right_padded:  # each row's new key/value written at its own column, then attention over the cache
                qkv = b.one("Add", [qkv, b.const(f"{p}.self.qkv.bias", b_qkv)])
                q, k, v = b.op("Split", [qkv], 3, axis=2, num_outputs=3)  # each (rows, 1, d)
                present_k = write_column(b, f"past_keys_{i}", k, columns, f"present_keys_{i}")
                present_v = write_column(b, f"past_values_{i}", v, columns, f"present_values_{i}")
                twice = b.one("Concat", [q, q], axis=1)  # two queries: the CPU kernel of two or more (docstring)
                both = b.attention(twice, present_k, present_v, ["", self_mask])[0]
                out = b.one("Slice", [both, "slice_first", "slice_second", "slice_axis_1"])  # (rows, 1, d)
                return b.linear(out, sa.out_proj, f"{p}.self.out")
            q, k, v = b.op("Split", [qkv], 3, axis=2, num_outputs=3)  # each (rows, 1, d), bias in MHA
            extra = [b.const(f"{p}.self.qkv.bias", b_qkv), self_mask, "", f"past_keys_{i}", f"past_values_{i}"]
            out, present_k, present_v = b.attention(q, k, v, extra, n_out=3)  # appends k, v to the cache
            b.rename_output(present_k, f"present_keys_{i}")
            b.rename_output(present_v, f"present_values_{i}")
            return b.linear(out, sa.out_proj, f"{p}.self.out")

        def cross_attention(h: str, i=i, p=p, ca=ca) -> str:
            if not ragged:
                q = b.one("Reshape", [b.linear(h, ca.q_proj, f"{p}.cross.q"), by_source])
                out = b.attention(q, f"cross_keys_{i}", f"cross_values_{i}", ["", key_mask])[0]
                rows = b.one("Reshape", [out, b.ints(f"{p}.shape_rows", [-1, 1, d])])
                return b.linear(rows, ca.out_proj, f"{p}.cross.out")
            q = b.one("Reshape", [b.linear(h, ca.q_proj, f"{p}.cross.q"), "shape_rows_d"])  # (rows, d)
            grouped = b.one("Gather", [q, "query_rows"], axis=0)  # (sources, group, d)
            out = b.attention(grouped, f"cross_keys_{i}", f"cross_values_{i}", ["", key_mask])[0]
            flat = b.one("Reshape", [out, "shape_rows_d"])  # (sources * group, d)
            rows = b.one("Gather", [flat, "row_slots"], axis=0)  # (rows, d), back in row order
            rows = b.one("Reshape", [rows, b.ints(f"{p}.shape_rows", [-1, 1, d])])
            return b.linear(rows, ca.out_proj, f"{p}.cross.out")

        x = b.residual(x, layer.self_residual, self_attention, f"{p}.self")
        x = b.residual(x, layer.cross_residual, cross_attention, f"{p}.cross")
        x = b.residual(x, layer.ffn_residual, lambda h, p=p, f=layer.ffn: b.feed_forward(h, f, f"{p}.ffn"), f"{p}.ffn")
    if cfg.norm_placement == "pre":
        x = b.norm(x, model.decoder_norm, "decoder.final_norm")
    x = b.one("Reshape", [x, "shape_rows_d"])  # (rows, d)
    logits = b.linear(x, model.output, "output")
    if cfg.banned_ids:  # -inf after the log-softmax (Transformer.log_probs): no search path can pick them
        normalized = b.one("LogSoftmax", [logits], axis=-1)
        banned = np.where(weights(model.banned), -np.inf, 0.0).astype(np.float32)
        b.nodes.append(helper.make_node("Add", [normalized, b.const("banned", banned)], ["log_probs"], name="Banned"))
    else:
        b.nodes.append(helper.make_node("LogSoftmax", [logits], ["log_probs"], name="LogSoftmax_out", axis=-1))
    # top_k 0 gives (rows, 0) outputs at no cost: greedy takes numpy's argmax of log_probs, cheaper than TopK
    top_k_meta = add_top_k(b, "log_probs", cfg.vocab_size)

    heads, d_head, f32 = cfg.n_heads, cfg.d_head, TensorProto.FLOAT
    cache, cross = ["rows", heads, "past_len", d_head], ["sources", heads, "src_len", d_head]
    inputs = [
        helper.make_tensor_value_info("tokens", TensorProto.INT64, ["rows", 1]),
        helper.make_tensor_value_info("src_mask", TensorProto.BOOL, ["sources", "src_len"]),
        helper.make_tensor_value_info("top_k", TensorProto.INT64, [1]),
    ]
    if ragged:
        inputs += [
            helper.make_tensor_value_info("positions", TensorProto.INT64, ["rows", 1]),
            helper.make_tensor_value_info("self_mask", TensorProto.BOOL, ["rows", "past_len_plus_1"]),
            helper.make_tensor_value_info("query_rows", TensorProto.INT64, ["sources", "group"]),
            helper.make_tensor_value_info("row_slots", TensorProto.INT64, ["rows"]),
        ]
    names = step_input_names(n_layers, interface)
    first = len(inputs)
    inputs += [helper.make_tensor_value_info(n, f32, cross) for n in names[first : first + 2 * n_layers]]
    inputs += [helper.make_tensor_value_info(n, f32, cache) for n in names[first + 2 * n_layers :]]
    outputs = [
        helper.make_tensor_value_info("log_probs", f32, ["rows", cfg.vocab_size]),
        helper.make_tensor_value_info("top_log_probs", f32, ["rows", "top_k"]),
        helper.make_tensor_value_info("top_ids", TensorProto.INT64, ["rows", "top_k"]),
    ]
    present = ["rows", heads, "past_len_plus_1", d_head]
    outputs += [helper.make_tensor_value_info(n, f32, present) for n in step_output_names(n_layers)[3:]]
    return b.model_proto("decoder_step", inputs, outputs, {STEP_INTERFACE_KEY: str(interface), **top_k_meta})
