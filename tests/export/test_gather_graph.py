"""The committed row-gather graph (engine/gather.onnx) is what export/gather_graph.py builds, and gathers
rows (1-D indices) and takes one layer out (a scalar index) of float32 tensors of any rank."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from export.gather_graph import GATHER_GRAPH, build_gather_graph


def test_committed_graph_is_the_built_one():
    assert GATHER_GRAPH.read_bytes() == build_gather_graph().SerializeToString(deterministic=True), (
        "engine/gather.onnx is stale: run python -m export.gather_graph"
    )


def test_gathers_rows_and_takes_out_a_layer():
    session = ort.InferenceSession(str(GATHER_GRAPH), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((3, 5, 2, 4, 6), dtype=np.float32)
    rows = np.array([2, 0, 0, 1])
    np.testing.assert_array_equal(session.run(None, {"x": x, "indices": rows})[0], x[rows])
    np.testing.assert_array_equal(session.run(None, {"x": x, "indices": np.array(1)})[0], x[1])
    np.testing.assert_array_equal(session.run(None, {"x": x[0, 0], "indices": np.array([1])})[0], x[0, 0, [1]])
