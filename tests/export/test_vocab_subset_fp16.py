"""The vocabulary-subset rewrite (export/vocab_subset.py) on an fp16 step graph, whose log_probs come from a Cast of
the fp16 LogSoftmax to float32 (export.quantize.convert_fp16_step keeps float32 outputs). The general-domain release
exports fp16 beside fp32 and int8, and `export.cli shortlist` rewrites every variant's step graphs: before this the
rewrite refused fp16 graphs ("log_probs is made by Cast")."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tiny_bundle import SAMPLE_SENTENCES

from core.bundle import load_bundle
from core.graphs import has_vocab_ids
from core.tokenizer import BOS_ID
from engine import Engine
from engine.decoder_state import DecoderState
from engine.search import TopCandidates
from export.quantize import convert_fp16_step
from export.vocab_subset import add_vocab_subset


@pytest.fixture(scope="module")
def fp16_graphs(tiny_bundle_dir, tmp_path_factory):
    """The tiny bundle's fp16 decoder_step (converted from fp32) and the same graph rewritten to take vocab_ids."""
    bundle = load_bundle(tiny_bundle_dir)
    work = tmp_path_factory.mktemp("fp16_subset")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the converter warns about every weight it clamps to fp16's range
        plain = convert_fp16_step(bundle.graph("fp32", "decoder_step"), work / "fp16.decoder_step.onnx")
    model = onnx.load(str(plain))
    assert any(n.op_type == "Cast" and n.output[0] == "log_probs" for n in model.graph.node)
    rewritten = work / "fp16.decoder_step.subset.onnx"
    onnx.save(add_vocab_subset(model), str(rewritten))
    return bundle, plain, rewritten


def test_fp16_step_graph_takes_a_vocabulary_subset(fp16_graphs):
    bundle, plain, rewritten = fp16_graphs
    before = ort.InferenceSession(str(plain), providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(str(rewritten), providers=["CPUExecutionProvider"])
    assert has_vocab_ids(after) and not has_vocab_ids(before)
    engine = Engine(bundle, variant="fp32", providers="cpu")
    enc = engine.run_encoder(engine.source_ids(SAMPLE_SENTENCES[:2]))
    sources = (enc["cross_keys"], enc["cross_values"], enc["src_mask"], True)
    tokens = np.full((2, 1), BOS_ID, dtype=np.int64)
    full = DecoderState(before, *sources).step(tokens, None)
    same = DecoderState(after, *sources).step(tokens, None)  # an empty subset runs the original nodes
    assert np.array_equal(full, same)
    ids = np.sort(np.random.default_rng(0).choice(engine.vocab_size, 40, replace=False)).astype(np.int64)
    top = DecoderState(after, *sources, top_k=5, vocab_ids=ids, vocab_size=engine.vocab_size).step(tokens, None)
    assert isinstance(top, TopCandidates) and top.log_probs.dtype == np.float32
    restricted = full[:, ids] - np.log(np.exp(full[:, ids]).sum(axis=1, keepdims=True))  # renormalized
    assert set(np.unique(top.ids)) <= set(ids.tolist())  # vocabulary ids, mapped back
    chosen = np.take_along_axis(restricted, np.searchsorted(ids, top.ids), axis=1)
    assert np.allclose(top.log_probs, chosen, atol=2e-2)  # fp16 arithmetic inside
    assert np.all(np.diff(top.log_probs, axis=1) <= 0)  # best first
    best = np.sort(restricted, axis=1)[:, ::-1][:, :5]
    assert np.allclose(top.log_probs, best, atol=2e-2)
