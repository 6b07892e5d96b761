"""The decoder step's two-stage top-k (export/decoder_step.add_top_k) = a full stable ranking, ties included."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from export.decoder_step import MAX_TOP_K, add_top_k, top_k_chunk
from export.graph_builder import GraphBuilder


def _top_k_session(vocab: int) -> tuple[ort.InferenceSession, int]:
    b = GraphBuilder(SimpleNamespace(cfg=None))
    meta = add_top_k(b, "log_probs", vocab)
    inputs = [
        helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, ["rows", vocab]),
        helper.make_tensor_value_info("top_k", TensorProto.INT64, [1]),
    ]
    outputs = [
        helper.make_tensor_value_info("top_log_probs", TensorProto.FLOAT, ["rows", "k"]),
        helper.make_tensor_value_info("top_ids", TensorProto.INT64, ["rows", "k"]),
    ]
    proto = b.model_proto("top_k", inputs, outputs, meta)
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]), int(
        meta["mtserve.max_top_k"]
    )


def test_chunk_sizes():
    assert top_k_chunk(8000) == 80 and MAX_TOP_K <= 8000 // 80
    assert top_k_chunk(320) == 10  # 32 chunks: every top_k up to MAX_TOP_K
    assert top_k_chunk(7919) == 0  # prime: one TopK over the whole vocabulary
    assert top_k_chunk(100) == 0  # too small for 32 chunks of >= 8 ids


@pytest.mark.parametrize("vocab", [8000, 320, 7919])
def test_two_stage_top_k_equals_a_stable_full_ranking(vocab):
    session, max_top_k = _top_k_session(vocab)
    rng = np.random.default_rng(vocab)
    rows = rng.standard_normal((24, vocab), dtype=np.float32) * 3
    rows[1] = 0.0  # every id tied: the lowest ids win
    rows[2, ::7] = rows[2].max() + 1  # ties at the top, spread over many chunks
    rows[3] = np.round(rows[3])  # many ties at every rank
    rows[4, -5:] = 50.0  # the best ids in the last chunk
    for k in (1, 2, 8, min(MAX_TOP_K, max_top_k)):
        values, ids = session.run(None, {"log_probs": rows, "top_k": np.array([k])})
        want = np.argsort(-rows, axis=1, kind="stable")[:, :k]  # value descending, then id ascending
        np.testing.assert_array_equal(ids, want, err_msg=f"vocab {vocab}, k {k}")
        np.testing.assert_array_equal(values, np.take_along_axis(rows, want, axis=1))


def test_top_k_zero_is_empty():
    session, _ = _top_k_session(8000)
    values, ids = session.run(None, {"log_probs": np.zeros((3, 8000), np.float32), "top_k": np.array([0])})
    assert values.shape == (3, 0) and ids.shape == (3, 0)
