"""What an int8 step graph's decoder layers compute, read from its nodes: the fused operator's flags.

The fused operator (native/fused_step/fused_step_op.c) computes the decoders our exporter writes
(export/decoder_step.py): pre-norm layers (ours) or post-norm ones (Hugging Face Marian / OPUS-MT, export/marian.py),
a ReLU, swish (x * sigmoid(x)) or GELU (exact, erf) feed-forward activation, an output product with or without a bias
(Marian's ``final_logits_bias``), and ids banned after the log-softmax (the ``banned`` constant: Marian's
``bad_words_ids``). The embedding scale and the position table (either sinusoidal layout) are weights the operator
reads as they are. ``step_layout`` checks each layer's wiring against the one the flags name and raises NotFused with
the reason where it is another.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.onnx_wire import Node

ACTIVATIONS = {"relu": 0, "swish": 1, "gelu": 2}  # the operator's `activation` attribute
LAYOUT_ATTRIBUTES = ("post_norm", "activation", "output_bias", "banned")  # the node's attributes StepLayout sets
ACTIVATION_OPS = {"Relu", "Sigmoid", "Gelu"}
BANNED = "banned"  # export/decoder_step.py: (vocab,) 0 or -inf, added to the log-probabilities
SUBLAYERS = [("self", "self.qkv", "self.out"), ("cross", "cross.q", "cross.out"), ("ffn", "ffn.w1", "ffn.w2")]


class NotFused(ValueError):
    """The graph is not one the fused operator computes (the message says why)."""


@dataclass(frozen=True)
class StepLayout:
    post_norm: bool = False
    activation: str = "relu"
    output_bias: bool = False
    banned: bool = False

    def attributes(self) -> dict[str, int]:
        """The fused node's attributes besides layers, heads and epsilon: only those that differ from the defaults
        (pre-norm, ReLU, no output bias, no bans), so our own bundles' fused nodes are the ones they always were."""
        out = {"post_norm": int(self.post_norm), "activation": ACTIVATIONS[self.activation]}
        out |= {"output_bias": int(self.output_bias), "banned": int(self.banned)}
        return {name: value for name, value in out.items() if value}


def _source(producer: dict[str, Node], name: str) -> Node | None:
    """The node whose output a product reads, through its QuantizeLinear and Reshapes."""
    node = producer.get(name)
    while node is not None and node.op_type in ("QuantizeLinear", "Reshape"):
        node = producer.get(node.inputs[0])
    return node


def _is_norm(node: Node | None, gamma: str) -> bool:
    return node is not None and node.op_type == "LayerNormalization" and node.inputs[1] == gamma


def _is_embedding(producer: dict[str, Node], node: Node) -> bool:
    """``node`` is the embedding sum: Add(Mul(Gather(embedding), scale), Gather(positions))."""
    kinds = sorted(producer[name].op_type for name in node.inputs if name in producer)
    return node.op_type == "Add" and kinds == ["Gather", "Mul"]


def _activation(producer: dict[str, Node], ff1: Node, ff2: Node) -> str | None:
    """The activation between a layer's two FFN products: relu, swish (Mul of a and Sigmoid(a)), gelu; or None."""
    a, act = ff1.outputs[0], _source(producer, ff2.inputs[0])
    if act is None:
        return None
    if act.op_type in ("Relu", "Gelu") and act.inputs[0] == a:
        return act.op_type.lower()
    if act.op_type == "Mul" and a in act.inputs:
        other = producer.get(act.inputs[1] if act.inputs[0] == a else act.inputs[0])
        if other is not None and other.op_type == "Sigmoid" and other.inputs[0] == a:
            return "swish"
    return None


def step_layout(every: list[Node], products: dict[str, Node], layers: int) -> StepLayout:
    """The layout of the step whose nodes (subgraphs' included) are ``every``; ``products``: the
    MatMulIntegerToFloat nodes by weight name. Raises NotFused where a layer is wired otherwise."""
    producer = {out: n for n in every for out in n.outputs}
    norms = {n.inputs[1] for n in every if n.op_type == "LayerNormalization"}
    post = "decoder.final_norm.gamma" not in norms
    need = [f"decoder.{i}.{sub}.weight_quantized" for i in range(layers) for _, a, b in SUBLAYERS for sub in (a, b)]
    missing = [w for w in need + ["output.weight_quantized"] if w not in products]
    if missing:
        raise NotFused(f"no MatMulIntegerToFloat reads {missing[0]}")
    x = None  # post-norm: the node whose output is the residual stream (the embedding sum, then each norm)
    activations = set()
    for i in range(layers):
        for sub, first, last in SUBLAYERS:
            gamma = f"decoder.{i}.{sub}.norm.gamma"
            head, tail = (
                products[f"decoder.{i}.{first}.weight_quantized"],
                products[f"decoder.{i}.{last}.weight_quantized"],
            )
            source = _source(producer, head.inputs[0])
            if not post:
                if not _is_norm(source, gamma):
                    raise NotFused(f"layer {i}'s {sub} sublayer does not read its norm {gamma} (pre-norm layers)")
                continue
            if (
                source is None
                or (x is None and not _is_embedding(producer, source))
                or (x is not None and source is not x)
            ):
                raise NotFused(f"layer {i}'s {sub} sublayer does not read the residual stream (post-norm layers)")
            norm = next((n for n in every if _is_norm(n, gamma)), None)
            add = producer.get(norm.inputs[0]) if norm is not None else None
            if (
                add is None
                or add.op_type != "Add"
                or sorted(add.inputs) != sorted([source.outputs[0], tail.outputs[0]])
            ):
                raise NotFused(f"layer {i}'s {sub} norm is not LayerNorm(x + sublayer(x)) (post-norm layers)")
            x = norm
        ff1, ff2 = products[f"decoder.{i}.ffn.w1.weight_quantized"], products[f"decoder.{i}.ffn.w2.weight_quantized"]
        activations.add(_activation(producer, ff1, ff2))
    if None in activations or len(activations) != 1:
        raise NotFused("the FFN activation is not one of ReLU, swish (x * sigmoid(x)) and GELU in every layer")
    activation = activations.pop()
    op = {"relu": "Relu", "swish": "Sigmoid", "gelu": "Gelu"}[activation]
    if (
        any(n.op_type in ACTIVATION_OPS and n.op_type != op for n in every)
        or sum(n.op_type == op for n in every) != layers
    ):
        raise NotFused(f"activations other than one {activation} per layer")
    output = products["output.weight_quantized"]
    final = _source(producer, output.inputs[0])
    if post and final is not x or not post and not _is_norm(final, "decoder.final_norm.gamma"):
        raise NotFused("the output product does not read the last layer's output (its final norm)")
    banned = [n for n in every if n.op_type == "Add" and BANNED in n.inputs]
    normalized = [producer.get(name) for n in banned for name in n.inputs if name != BANNED]
    if len(banned) > 1 or any(n is None or n.op_type != "LogSoftmax" for n in normalized):
        raise NotFused("the banned ids are not added once to the log-softmax's output")
    has_bias = len(output.inputs) > 6 and bool(output.inputs[6])
    return StepLayout(post, activation, has_bias, bool(banned))
