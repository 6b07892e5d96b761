"""The lean decoder-step graph (``decoder_step.onnx``): one new token per row, no attention outputs.

Built node by node from the model's weights (onnx.helper), for search only; ``decoder.onnx`` stays the
graph for attention and teacher forcing. What makes a step cheaper than with ``decoder.onnx``:
- no attention-probability outputs, and per-layer caches (``past_keys_<i>`` ... ``present_values_<i>``,
  each (rows, heads, past_len, d_head)) instead of stacked (layers, ...) tensors that every step split
  and re-stacked;
- attention through onnxruntime's fused ``com.microsoft.MultiHeadAttention`` (CPU and CUDA kernels):
  self-attention appends to the cache itself, cross-attention reads the precomputed keys/values;
- cross keys/values and ``src_mask`` have one row per *source*; the rows of a step are grouped by source
  (rows = sources x rows_per_source: 1 for greedy, the beam for beam search), so the beams of a sentence
  share one cross-attention call (queries (sources, beam, d)) and the engine never repeats them per beam;
- one fused Q|K|V projection per self-attention; activations (rows, 1, d_model), the layout the fused
  attention reads, so no reshapes around it;
- ``log_probs`` (rows, vocab) for the new token, and ``top_log_probs`` / ``top_ids`` (rows, top_k) its
  ``top_k`` (an input) best tokens, best first, ties to the lower id (onnxruntime TopK): beam search reads
  only these; greedy asks for top_k 0 (empty, free) and takes numpy's argmax of log_probs, cheaper than TopK.
The position of the new token is the cache length, read from ``past_keys_0``'s shape.
Interface version (``STEP_INTERFACE``) is stored in the model's metadata; version 1 graphs (cross keys per
row) have no such entry. Parity with PyTorch (max abs diff <= 1e-4): ``export.parity.step_max_diff``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from model.positional import sinusoidal_table
from model.transformer import Transformer

MS_DOMAIN = "com.microsoft"
STEP_INTERFACE = "2"  # metadata "mtserve.decoder_step": cross keys/values per source


def step_input_names(n_layers: int) -> list[str]:
    names = ["tokens", "src_mask", "top_k"]
    for i in range(n_layers):
        names += [f"cross_keys_{i}", f"cross_values_{i}"]
    for i in range(n_layers):
        names += [f"past_keys_{i}", f"past_values_{i}"]
    return names


def step_output_names(n_layers: int) -> list[str]:
    names = ["log_probs", "top_log_probs", "top_ids"]
    for i in range(n_layers):
        names += [f"present_keys_{i}", f"present_values_{i}"]
    return names


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []  # types of contrib-op outputs for shape inference
        self._count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs) -> list[str]:
        self._count += 1
        outs = [f"{op_type.lower()}_{self._count}_{j}" for j in range(n_out)]
        self.nodes.append(
            helper.make_node(op_type, inputs, outs, name=f"{op_type}_{self._count}", domain=domain, **attrs)
        )
        if domain == MS_DOMAIN:  # onnx shape inference skips contrib ops: their (float) outputs get a type here
            self.value_info += [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
        return outs

    def one(self, op_type: str, inputs: list[str], **attrs) -> str:
        return self.op(op_type, inputs, **attrs)[0]


def _w(t) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def supports_decoder_step(model: Transformer) -> bool:
    return model.cfg.positional_encoding != "relative"


def build_decoder_step(model: Transformer) -> onnx.ModelProto:
    """The decoder-step graph of ``model`` (post- or pre-norm, sinusoidal or learned positions, any FFN)."""
    cfg = model.cfg
    if not supports_decoder_step(model):
        raise ValueError("the lean decoder step does not implement relative positions; use decoder.onnx")
    n_layers, d, heads = cfg.n_decoder_layers, cfg.d_model, cfg.n_heads
    b = _Builder()
    pre = cfg.norm_placement == "pre"
    shape_rows = b.const("shape_rows_1_d", np.array([-1, 1, d], dtype=np.int64))
    # queries grouped by source: (sources, rows_per_source, d)
    n_sources = b.one("Shape", ["src_mask"], start=0, end=1)
    by_source = b.one("Concat", [n_sources, b.const("shape_any_d", np.array([-1, d], dtype=np.int64))], axis=0)

    # embedding * sqrt(d) + position (the cache length), as in Transformer._embed
    table = _w(model.tgt_embed.weight)
    x = b.one("Gather", [b.const("embedding", table), "tokens"], axis=0)  # (rows, 1, d)
    x = b.one("Mul", [x, b.const("embedding_scale", np.array(math.sqrt(d), dtype=np.float32))])
    if cfg.positional_encoding == "sinusoidal":
        positions = sinusoidal_table(cfg.max_positions, d).numpy()
    else:
        positions = _w(model.positions.embedding.weight)
    position = b.one("Shape", ["past_keys_0"], start=2, end=3)  # (1,) = past_len
    x = b.one("Add", [x, b.one("Gather", [b.const("positions", positions), position], axis=0)])
    # (sources, src) 1 = attend. A source needs one real token (the engine's always end with EOS): where all
    # are padding, PyTorch's cross-attention gives zeros, the fused kernel a uniform average
    key_mask = b.one("Cast", ["src_mask"], to=TensorProto.INT32)

    def linear(h: str, layer, name: str) -> str:
        out = b.one("MatMul", [h, b.const(f"{name}.weight", _w(layer.weight).T)])
        return b.one("Add", [out, b.const(f"{name}.bias", _w(layer.bias))]) if layer.bias is not None else out

    def norm(h: str, ln, name: str) -> str:
        return b.one(
            "LayerNormalization",
            [h, b.const(f"{name}.gamma", _w(ln.weight)), b.const(f"{name}.beta", _w(ln.bias))],
            axis=-1,
            epsilon=ln.eps,
        )

    def residual(h: str, residual_module, sublayer, name: str) -> str:
        if pre:
            return b.one("Add", [h, sublayer(norm(h, residual_module.norm, name + ".norm"))])
        # Add + LayerNormalization: com.microsoft.SkipLayerNormalization measured 4x slower here (CPU)
        return norm(b.one("Add", [h, sublayer(h)]), residual_module.norm, name + ".norm")

    for i, layer in enumerate(model.decoder_layers):
        p = f"decoder.{i}"
        sa, ca, ffn = layer.self_attn, layer.cross_attn, layer.ffn

        def self_attention(h: str, i=i, p=p, sa=sa) -> str:
            w_qkv = np.concatenate([_w(sa.q_proj.weight), _w(sa.k_proj.weight), _w(sa.v_proj.weight)]).T
            b_qkv = np.concatenate([_w(sa.q_proj.bias), _w(sa.k_proj.bias), _w(sa.v_proj.bias)])
            qkv = b.one("MatMul", [h, b.const(f"{p}.self.qkv.weight", w_qkv)])  # (rows, 1, 3d)
            q, k, v = b.op("Split", [qkv], 3, axis=2, num_outputs=3)  # each (rows, 1, d)
            attn = b.op(
                "MultiHeadAttention",
                [q, k, v, b.const(f"{p}.self.qkv.bias", b_qkv), "", "", f"past_keys_{i}", f"past_values_{i}"],
                3,
                domain=MS_DOMAIN,
                num_heads=heads,
            )
            b.nodes[-1].output[1:] = [f"present_keys_{i}", f"present_values_{i}"]  # graph outputs
            b.value_info[-2:] = []
            return linear(attn[0], sa.out_proj, f"{p}.self.out")

        def cross_attention(h: str, i=i, p=p, ca=ca) -> str:
            q = b.one("Reshape", [linear(h, ca.q_proj, f"{p}.cross.q"), by_source])  # (sources, per source, d)
            attn = b.one(
                "MultiHeadAttention",
                [q, f"cross_keys_{i}", f"cross_values_{i}", "", key_mask],
                domain=MS_DOMAIN,
                num_heads=heads,
            )
            return linear(b.one("Reshape", [attn, shape_rows]), ca.out_proj, f"{p}.cross.out")

        def feed_forward(h: str, p=p, ffn=ffn) -> str:
            hidden = linear(h, ffn.w1, f"{p}.ffn.w1")
            if cfg.activation == "relu":
                hidden = b.one("Relu", [hidden])
            elif cfg.activation == "swiglu":  # silu(a) = a * sigmoid(a)
                hidden = b.one("Mul", [hidden, b.one("Sigmoid", [hidden])])
            else:  # gelu, geglu: exact (erf) gelu, as torch.nn.functional.gelu
                hidden = b.one("Gelu", [hidden], domain=MS_DOMAIN)
            if ffn.w3 is not None:  # gated: act(W1 x) * W3 x
                hidden = b.one("Mul", [hidden, linear(h, ffn.w3, f"{p}.ffn.w3")])
            return linear(hidden, ffn.w2, f"{p}.ffn.w2")

        x = residual(x, layer.self_residual, self_attention, f"{p}.self")
        x = residual(x, layer.cross_residual, cross_attention, f"{p}.cross")
        x = residual(x, layer.ffn_residual, feed_forward, f"{p}.ffn")
    if pre:
        x = norm(x, model.decoder_norm, "decoder.final_norm")
    x = b.one("Reshape", [x, b.const("shape_rows_d", np.array([-1, d], dtype=np.int64))])  # (rows, d)
    logits = b.one("MatMul", [x, b.const("output.weight", _w(model.output.weight).T)])
    if model.output.bias is not None:
        logits = b.one("Add", [logits, b.const("output.bias", _w(model.output.bias))])
    b.nodes.append(helper.make_node("LogSoftmax", [logits], ["log_probs"], name="LogSoftmax_out", axis=-1))
    # top_k 0 gives (rows, 0) outputs at no cost: greedy takes numpy's argmax of log_probs, cheaper than TopK
    b.nodes.append(
        helper.make_node("TopK", ["log_probs", "top_k"], ["top_log_probs", "top_ids"], name="TopK_out", axis=-1)
    )

    cache = ["rows", heads, "past_len", cfg.d_head]
    cross = ["sources", heads, "src_len", cfg.d_head]
    f32, present = TensorProto.FLOAT, ["rows", heads, "past_len_plus_1", cfg.d_head]
    inputs = [
        helper.make_tensor_value_info("tokens", TensorProto.INT64, ["rows", 1]),
        helper.make_tensor_value_info("src_mask", TensorProto.BOOL, ["sources", "src_len"]),
        helper.make_tensor_value_info("top_k", TensorProto.INT64, [1]),
    ]
    names = step_input_names(n_layers)
    inputs += [helper.make_tensor_value_info(n, f32, cross) for n in names[3 : 3 + 2 * n_layers]]
    inputs += [helper.make_tensor_value_info(n, f32, cache) for n in names[3 + 2 * n_layers :]]
    outputs = [
        helper.make_tensor_value_info("log_probs", f32, ["rows", cfg.vocab_size]),
        helper.make_tensor_value_info("top_log_probs", f32, ["rows", "top_k"]),
        helper.make_tensor_value_info("top_ids", TensorProto.INT64, ["rows", "top_k"]),
    ]
    outputs += [helper.make_tensor_value_info(n, f32, present) for n in step_output_names(n_layers)[3:]]
    graph = helper.make_graph(b.nodes, "decoder_step", inputs, outputs, b.initializers, value_info=b.value_info)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid(MS_DOMAIN, 1)]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="mtserve.export.decoder_step")
    proto.ir_version = 9
    helper.set_model_props(proto, {"mtserve.decoder_step": STEP_INTERFACE})
    return proto
