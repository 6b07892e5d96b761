"""Bundle format 2 (export/pack.py): each tensor stored once, the graphs of every variant reading shared weights
files by offset, and nothing computed differently: the tiny release exported by the CLI as format 1 (self-contained
graphs, the old writer) and as format 2 gives bit-identical translations, scores, embeddings and attention for
fp32, int8 and fp16. Format-1 bundles still load and serve.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tiny_bundle import SAMPLE_SENTENCES, write_corpus

from core.bundle import load_bundle
from core.graphs import SEARCH_LOOP, STEP_GRAPHS
from engine import Engine
from engine.decoding import TranslateOptions
from export.cli import main
from export.pack import GRAPH_KEYS, INLINE_BELOW, PACKED, storage, tensors

VARIANTS = ("fp32", "int8", "fp16")


def _export(release: Path, out: Path, corpus: Path, bundle_format: int) -> Path:
    args = ["export", "--model", str(release), "--out", str(out), "--name", "de-en", "--variants", *VARIANTS]
    args += ["--calibration-data", str(corpus / "train.de"), "--calibration-sentences", "64"]
    assert main([*args, "--bundle-format", str(bundle_format)]) == 0
    return out


@pytest.fixture(scope="module")
def bundles(tiny_model_dir, tmp_path_factory) -> dict[int, Path]:
    """The tiny release exported twice by ``python -m export.cli export``: format 1 and format 2."""
    root = tmp_path_factory.mktemp("layout")
    corpus = write_corpus(root / "corpus", n_train=200, n_valid=1)
    release = tiny_model_dir / "release"
    return {n: _export(release, root / f"format{n}" / "de-en" / "1", corpus, n) for n in (1, 2)}


def _manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def test_the_writer_still_emits_format_1_and_it_loads(bundles):
    old = load_bundle(bundles[1])
    assert old.manifest["format"] == "mtserve-bundle/1"
    assert set(old.variants) == set(VARIANTS)
    for variant in VARIANTS:
        assert old.graph(variant, "encoder") == bundles[1] / variant / "encoder.onnx"
        assert old.weights(variant) == []  # self-contained graphs
    assert not any(p.suffix == ".weights" for p in bundles[1].rglob("*"))
    new = load_bundle(bundles[2])
    assert new.manifest["format"] == "mtserve-bundle/2"
    assert new.graph("int8", "decoder_step") == bundles[2] / "graphs" / "int8.decoder_step.onnx"
    assert [p.name for p in new.weights("int8")] == ["fp32.weights", "int8.weights"]
    assert [p.name for p in new.weights("fp16")] == ["fp32.weights"]  # every fp16 tensor is a Cast of fp32's
    assert new.graph("fp16", "decoder_step") == bundles[2] / "graphs" / "fp16.decoder_step.onnx"  # its own step


@pytest.mark.parametrize("variant", VARIANTS)
def test_both_formats_compute_the_same_bits(bundles, variant):
    old, new = (Engine(load_bundle(bundles[n]), variant=variant, providers="cpu") for n in (1, 2))
    texts = SAMPLE_SENTENCES * 3
    for beam in (1, 4):
        options = TranslateOptions(beam_size=beam, num_hypotheses=beam)
        for a, b in zip(old.translate(texts, options), new.translate(texts, options), strict=True):
            assert a.token_ids == b.token_ids and a.score == b.score
            assert a.hypotheses == b.hypotheses
    # a lone sentence: format 2's search loop graph (one call) against format 1's step-by-step search
    assert old.search_loop is None  # format 1's graphs hold their weights: no loop
    assert (new.search_loop is None) == (variant == "fp16")  # float16 graphs get none (export/search_loop.py)
    for sentence in SAMPLE_SENTENCES:
        for beam in (1, 4):
            options = TranslateOptions(beam_size=beam, num_hypotheses=beam)
            (a,), (b,) = old.translate([sentence], options), new.translate([sentence], options)
            assert a.token_ids == b.token_ids and a.score == b.score and a.hypotheses == b.hypotheses
    np.testing.assert_array_equal(old.embed(SAMPLE_SENTENCES), new.embed(SAMPLE_SENTENCES))
    for sentence in SAMPLE_SENTENCES[:2]:  # decoder.onnx (attention outputs, teacher forcing)
        a, b = old.attention(sentence), new.attention(sentence)
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], np.ndarray):
                np.testing.assert_array_equal(a[key], b[key])
            else:
                assert a[key] == b[key], key


def test_each_tensor_is_stored_once_and_int8_keeps_no_float_copy(bundles):
    manifest = _manifest(bundles[2])
    report = storage(bundles[2], manifest)
    assert report["duplicates"] == []
    assert set(manifest["files"]) >= {"graphs/fp32.weights", "graphs/int8.weights"}
    assert "graphs/fp16.weights" not in manifest["files"]
    for variant, entry in manifest["variants"].items():
        for graph in (g for g in GRAPH_KEYS if g in entry):
            for init, data, region in tensors(bundles[2] / entry[graph]):
                assert region is not None or len(data) < INLINE_BELOW, (variant, graph, init.name)
                if region is not None and region.file == "int8.weights":  # int8 weights and their scales only
                    assert init.data_type == onnx.TensorProto.INT8 or init.name.endswith("_scale"), init.name
    old = sum(meta["size"] for meta in _manifest(bundles[1])["files"].values())
    assert report["total"] < old / 2.5, (report["total"], old)


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The graph's nodes and those of its Loop body (the search loop graph holds the step graph there)."""
    nodes = list(model.graph.node)
    for node in model.graph.node:
        if node.op_type == "Loop":
            nodes += list(node.attribute[0].g.node)
    return nodes


def test_derived_tensors_are_folded_when_a_session_starts(bundles):
    """Transpose / Concat / Cast / ScatterND nodes the packer added read initializers only: onnxruntime's basic
    optimizations (constant folding, every execution provider) leave none of them in the optimized graph, nor in
    the search loop's body, which holds the whole-batch step graph's nodes."""
    manifest = _manifest(bundles[2])
    for variant, entry in manifest["variants"].items():
        for graph in (*GRAPH_KEYS, SEARCH_LOOP):
            if graph not in entry:
                continue
            path = bundles[2] / entry[graph]
            added = [n.name for n in _nodes(onnx.load(str(path), load_external_data=False)) if n.name.endswith(PACKED)]
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            with tempfile.TemporaryDirectory() as tmp:
                options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
                ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                optimized = onnx.load(options.optimized_model_filepath, load_external_data=False)
            left = {n.name for n in _nodes(optimized)} & set(added)
            assert not left, (variant, graph, sorted(left))
            if variant == "fp16" or graph in (*STEP_GRAPHS, SEARCH_LOOP):
                assert added, (variant, graph)  # something was derived (fp16 casts, int8/fp32 Q|K|V concat)
