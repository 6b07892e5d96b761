"""Node-by-node ONNX building blocks for the lean search graph (decoder_step.onnx).

The graphs are written from the model's weights with onnx.helper instead of traced, so they can use
onnxruntime's fused kernels (``com.microsoft`` domain) and leave out what search never reads. Every
block mirrors a module of ``model/`` and is checked against it by export/parity.py.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from model.positional import sinusoidal_table
from model.transformer import Transformer

MS_DOMAIN = "com.microsoft"
OPSETS = [helper.make_opsetid("", 18), helper.make_opsetid(MS_DOMAIN, 1)]


def weights(t) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def supports_lean_graphs(model: Transformer) -> bool:
    """Vanilla softmax attention with absolute positions: relative positions (Shaw, Transformer-XL) live inside
    self-attention and sparse patterns mask it, which the fused kernel's inputs do not express; linear attention
    is not softmax attention at all. Those variants search with decoder.onnx."""
    cfg = model.cfg
    return cfg.attention == "vanilla" and cfg.positional_encoding in ("sinusoidal", "learned")


class GraphBuilder:
    def __init__(self, model: Transformer | None, cfg=None) -> None:
        """Blocks that read weights need ``model``; ``cfg`` alone (n_heads, d_head, ...) serves the weightless ones
        (export/upgrade.py rewrites a released graph with them)."""
        self.model, self.cfg = model, model.cfg if model is not None else cfg
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []  # types of contrib-op outputs for shape inference
        self._count = 0

    # --- nodes -------------------------------------------------------------------------------------
    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def ints(self, name: str, values: list[int]) -> str:
        return self.const(name, np.array(values, dtype=np.int64))

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

    def rename_output(self, old: str, new: str) -> None:
        """Give a node output a graph-output name (it then needs no value_info)."""
        for node in self.nodes:
            node.output[:] = [new if o == old else o for o in node.output]
        self.value_info = [v for v in self.value_info if v.name != old]

    # --- model blocks ------------------------------------------------------------------------------
    def embed(self, tokens: str, embedding, position: str) -> str:
        """embedding(tokens) * scale (sqrt(d), or 1 without scale_embedding) + the positional table's row
        ``position`` (1,), as Transformer._embed."""
        cfg, model = self.cfg, self.model
        if cfg.positional_encoding == "sinusoidal":
            table = sinusoidal_table(cfg.max_positions, cfg.d_model, cfg.sinusoidal_layout).numpy()
        else:
            table = weights(model.positions.embedding.weight)
        x = self.one("Gather", [self.const(f"{tokens}.embedding", weights(embedding.weight)), tokens], axis=0)
        x = self.one("Mul", [x, self.const(f"{tokens}.scale", np.array(model.embed_scale, dtype=np.float32))])
        return self.one("Add", [x, self.one("Gather", [self.const(f"{tokens}.positions", table), position], axis=0)])

    def linear(self, h: str, layer, name: str) -> str:
        out = self.one("MatMul", [h, self.const(f"{name}.weight", weights(layer.weight).T)])
        if layer.bias is None:
            return out
        return self.one("Add", [out, self.const(f"{name}.bias", weights(layer.bias))])

    def norm(self, h: str, ln, name: str) -> str:
        gamma, beta = self.const(f"{name}.gamma", weights(ln.weight)), self.const(f"{name}.beta", weights(ln.bias))
        return self.one("LayerNormalization", [h, gamma, beta], axis=-1, epsilon=ln.eps)

    def residual(self, h: str, residual_module, sublayer, name: str) -> str:
        """Post-norm LN(h + f(h)) or pre-norm h + f(LN(h)), as model.layers.Residual.

        Add + LayerNormalization, not com.microsoft.SkipLayerNormalization: its CPU kernel measured 4-6x
        slower here (docs/engine-speed-log.md).
        """
        if self.cfg.norm_placement == "pre":
            return self.one("Add", [h, sublayer(self.norm(h, residual_module.norm, name + ".norm"))])
        return self.norm(self.one("Add", [h, sublayer(h)]), residual_module.norm, name + ".norm")

    def feed_forward(self, h: str, ffn, name: str) -> str:
        hidden = self.linear(h, ffn.w1, f"{name}.w1")
        if self.cfg.activation == "relu":
            hidden = self.one("Relu", [hidden])
        elif self.cfg.activation in ("swish", "swiglu"):  # silu(a) = a * sigmoid(a)
            hidden = self.one("Mul", [hidden, self.one("Sigmoid", [hidden])])
        else:  # gelu, geglu: exact (erf) gelu, as torch.nn.functional.gelu
            hidden = self.one("Gelu", [hidden], domain=MS_DOMAIN)
        if ffn.w3 is not None:  # gated: act(W1 x) * W3 x
            hidden = self.one("Mul", [hidden, self.linear(h, ffn.w3, f"{name}.w3")])
        return self.linear(hidden, ffn.w2, f"{name}.w2")

    def attention(self, q: str, k: str, v: str, extra: list[str] | None = None, n_out: int = 1) -> list[str]:
        """com.microsoft.MultiHeadAttention: softmax(Q K^T / sqrt(d_head)) V over ``n_heads`` heads.

        ``extra`` continues the input list after value: bias, key_padding_mask, attention_bias, past_key, ...
        """
        return self.op(
            "MultiHeadAttention", [q, k, v, *(extra or [])], n_out, domain=MS_DOMAIN, num_heads=self.cfg.n_heads
        )

    def model_proto(self, name: str, inputs, outputs, metadata: dict[str, str]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers, value_info=self.value_info)
        proto = helper.make_model(graph, opset_imports=OPSETS, producer_name=f"mtserve.export.{name}")
        proto.ir_version = 9
        helper.set_model_props(proto, metadata)
        return proto
