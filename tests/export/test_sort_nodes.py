"""export.quantize.sort_nodes: onnxruntime's fp16 converter appends the input Casts after the nodes that read them;
sorting makes the graph valid for onnx.checker and leaves a graph already in order as it was."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from export.quantize import sort_nodes


def _graph(nodes):
    return helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
    )


def _chain():
    return [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Neg", ["x"], ["b"], name="b"),
        helper.make_node("Add", ["a", "b"], ["c"], name="c"),
        helper.make_node("Identity", ["c"], ["z"], name="z"),
    ]


def test_out_of_order_nodes_are_sorted_and_pass_the_checker():
    nodes = _chain()
    graph = _graph([nodes[3], nodes[2], nodes[1], nodes[0]])
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(helper.make_model(graph))
    sort_nodes(graph)
    onnx.checker.check_model(helper.make_model(graph))
    assert [n.name for n in graph.node] == ["b", "a", "c", "z"]  # ready nodes in their old order


def test_a_sorted_graph_is_unchanged_and_a_cycle_is_refused():
    graph = _graph(_chain())
    sort_nodes(graph)
    assert [n.name for n in graph.node] == ["a", "b", "c", "z"]
    cycle = _graph([helper.make_node("Relu", ["y"], ["z"]), helper.make_node("Neg", ["z"], ["y"])])
    with pytest.raises(ValueError, match="cycle"):
        sort_nodes(cycle)
