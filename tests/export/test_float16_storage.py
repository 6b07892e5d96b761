"""Float16 storage (export.cli ``--float16-storage``, export/pack.py): the weights rounded to float16 and stored so,
each float32 tensor read as a Cast that onnxruntime folds at session start. Against the same rounded model exported
with float32 storage, every variant computes the same bits (translations, scores, hypotheses, embeddings,
attention) in about half the bytes; the Casts leave no node behind once a session has started; the fused step
(where this CPU runs it) still takes the int8 step graph.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from tiny_bundle import SAMPLE_SENTENCES, write_corpus

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from export.cli import main
from export.float16_storage import HALF_FILE, exact_half, release_from_bundle
from export.pack import GRAPH_KEYS, PACKED, storage, tensors
from model.checkpoint import CONFIG_FILE, TOKENIZER_FILE, load_release, round_to_float16, save_release

VARIANTS = ("fp32", "int8", "fp16")


@pytest.fixture(scope="module")
def bundles(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """``half``: the tiny release exported with --float16-storage; ``full``: the same release rounded to float16
    by hand and exported with float32 storage (what the half bundle must compute, bit for bit)."""
    root = tmp_path_factory.mktemp("float16-storage")
    corpus = write_corpus(root / "corpus", n_train=200, n_valid=1)
    release = tiny_model_dir / "release"
    model, meta = load_release(release)
    round_to_float16(model)
    rounded = root / "rounded"
    save_release(rounded, model, {k: v for k, v in meta.items() if k != "model"})
    shutil.copy(release / TOKENIZER_FILE, rounded / TOKENIZER_FILE)
    assert json.loads((rounded / CONFIG_FILE).read_text())["model"] == meta["model"]
    out = {}
    for kind, source, extra in (("half", release, ["--float16-storage"]), ("full", rounded, [])):
        out[kind] = root / kind / "de-en" / "1"
        args = ["export", "--model", str(source), "--out", str(out[kind]), "--name", "de-en"]
        args += ["--variants", *VARIANTS, "--calibration-data", str(corpus / "train.de")]
        assert main([*args, "--calibration-sentences", "64", *extra]) == 0
    return out


def _manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def test_round_to_float16_leaves_values_float16_holds(tiny_model_dir):
    model, _ = load_release(tiny_model_dir / "release")
    before = [p.detach().clone() for p in model.parameters()]
    round_to_float16(model)
    changed = 0
    for old, new in zip(before, model.parameters(), strict=True):
        assert new.dtype == old.dtype
        assert exact_half(new.detach().numpy()) is not None
        changed += int((old != new).sum())
        np.testing.assert_allclose(new.detach().numpy(), old.numpy(), rtol=2**-11, atol=2**-24)
    assert changed > 0  # float32 training leaves values float16 does not hold


@pytest.mark.parametrize("variant", VARIANTS)
def test_float16_storage_computes_the_same_bits(bundles, variant):
    half, full = (Engine(load_bundle(bundles[k]), variant=variant, providers="cpu") for k in ("half", "full"))
    for texts in (SAMPLE_SENTENCES * 3, SAMPLE_SENTENCES[:1]):  # whole batches, and a lone sentence (search loop)
        for beam in (1, 4):
            options = TranslateOptions(beam_size=beam, num_hypotheses=beam)
            for a, b in zip(half.translate(texts, options), full.translate(texts, options), strict=True):
                assert a.token_ids == b.token_ids and a.score == b.score and a.hypotheses == b.hypotheses
    np.testing.assert_array_equal(half.embed(SAMPLE_SENTENCES), full.embed(SAMPLE_SENTENCES))
    a, b = half.attention(SAMPLE_SENTENCES[0]), full.attention(SAMPLE_SENTENCES[0])
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key])
        else:
            assert a[key] == b[key], key


def test_float_tensors_are_stored_once_as_float16(bundles):
    half, full = _manifest(bundles["half"]), _manifest(bundles["full"])
    assert "graphs/" + HALF_FILE in half["files"]
    assert "rounded to float16" in half["training"]["weights"]
    report = storage(bundles["half"], half)
    assert report["duplicates"] == []
    stored_float32 = {}  # every float32 region outside the int8 weights file (its scales): float16 cannot hold it
    for entry in half["variants"].values():
        for graph in (g for g in GRAPH_KEYS if g in entry):
            for init, _, region in tensors(bundles["half"] / entry[graph]):
                if region is not None and init.data_type == onnx.TensorProto.FLOAT and region.file != "int8.weights":
                    stored_float32[region] = init.name
    for region, name in stored_float32.items():
        with open(bundles["half"] / "graphs" / region.file, "rb") as f:
            f.seek(region.offset)
            assert exact_half(np.frombuffer(f.read(region.length), dtype=np.float32)) is None, name
    full_float = full["files"]["graphs/fp32.weights"]["size"]
    assert sum(r.length for r in stored_float32) < 0.1 * full_float  # the sinusoid table of the tiny model
    header = int.from_bytes((bundles["half"] / "graphs" / HALF_FILE).read_bytes()[:8], "little")  # safetensors
    floats = half["files"]["graphs/" + HALF_FILE]["size"] - 8 - header + half["files"]["graphs/fp32.weights"]["size"]
    assert floats < 0.55 * full_float, (floats, full_float)
    # the int8 weights file: the same int8 tensors; a float32 scale that float16 holds exactly (a per-channel 7-bit
    # weight scale is the channel's largest weight / 64, exact when that weight is) is in the float16 file instead
    in_int8 = {kind: _int8_file_tensors(bundles[kind], manifest) for kind, manifest in (("half", half), ("full", full))}
    kinds = {
        kind: {k: v for k, v in tensors_.items() if v[0] == onnx.TensorProto.INT8} for kind, tensors_ in in_int8.items()
    }
    assert kinds["half"] == kinds["full"] and kinds["full"]
    for key, (dtype, data) in in_int8["full"].items():
        if key not in in_int8["half"]:
            assert dtype == onnx.TensorProto.FLOAT and exact_half(np.frombuffer(data, dtype=np.float32)) is not None, (
                key
            )
        else:
            assert in_int8["half"][key] == (dtype, data), key


def _int8_file_tensors(bundle: Path, manifest: dict) -> dict[tuple[str, str], tuple[int, bytes]]:
    """(graph, initializer) -> (its data type, its bytes) of every tensor the int8 variant keeps in int8.weights."""
    out = {}
    entry = manifest["variants"]["int8"]
    for graph in (g for g in GRAPH_KEYS if g in entry):
        for init, _, region in tensors(bundle / entry[graph]):
            if region is not None and region.file == "int8.weights":
                with open(bundle / "graphs" / region.file, "rb") as f:
                    f.seek(region.offset)
                    out[graph, init.name] = (init.data_type, f.read(region.length))
    return out


def test_the_casts_are_folded_when_a_session_starts(bundles):
    manifest = _manifest(bundles["half"])
    casts = 0
    for entry in manifest["variants"].values():
        for graph in (g for g in GRAPH_KEYS if g in entry):
            path = bundles["half"] / entry[graph]
            nodes = onnx.load(str(path), load_external_data=False).graph.node
            added = {n.name for n in nodes if n.name.endswith(PACKED)}
            casts += sum(n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT for n in nodes)
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            with tempfile.TemporaryDirectory() as tmp:
                options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
                ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                optimized = onnx.load(options.optimized_model_filepath, load_external_data=False)
            assert not {n.name for n in optimized.graph.node} & added, (graph, path.name)
    assert casts > 0


def test_the_fused_step_takes_a_float16_stored_bundle_where_it_takes_the_other(bundles):
    full = Engine(load_bundle(bundles["full"]), variant="int8", providers="cpu", fused_step="auto")
    half = Engine(load_bundle(bundles["half"]), variant="int8", providers="cpu", fused_step="auto")
    assert half.fused_step == full.fused_step
    options = TranslateOptions(beam_size=4, num_hypotheses=1)
    texts = SAMPLE_SENTENCES * 2
    for a, b in zip(half.translate(texts, options), full.translate(texts, options), strict=True):
        assert a.token_ids == b.token_ids and a.score == b.score


def test_the_fused_step_reads_the_float16_table_itself(bundles):
    """The fused operator takes the stored float16 embedding (it converts the rows it gathers), not the Cast's float32
    table: its session then holds no float32 copy (bit-identical answers: the test above)."""
    from engine.fused_step_graph import EMBEDDING, OP_TYPE, SEARCH_OP_TYPE, fused_search_graph, fused_step_graph

    manifest = _manifest(bundles["half"])["variants"]["int8"]
    checked = 0
    for key, rewrite in (("decoder_step_batch", fused_step_graph), ("decoder_loop", fused_search_graph)):
        if key not in manifest:
            continue
        graph = onnx.load_from_string(rewrite(bundles["half"] / manifest[key])).graph
        halves = {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT16}
        fused = [n for n in graph.node if n.op_type in (OP_TYPE, SEARCH_OP_TYPE)]
        assert len(fused) == 1, key
        assert EMBEDDING not in fused[0].input and halves & set(fused[0].input), key
        assert not any(EMBEDDING in n.output for n in graph.node), key  # the Cast is gone
        checked += 1
    assert checked >= 1


def test_an_embedding_is_gathered_as_float16_outside_the_step_graphs(bundles):
    """The encoder's embedding stays float16 in its session (rows are cast after the Gather)."""
    manifest = _manifest(bundles["half"])
    for variant in ("fp32", "int8"):
        graph = onnx.load(str(bundles["half"] / manifest["variants"][variant]["encoder"]), load_external_data=False)
        halves = {i.name for i in graph.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16}
        assert any(n.op_type == "Gather" and n.input[0] in halves for n in graph.graph.node), variant


def test_verify_compares_the_bundle_with_the_release_rounded_as_it_was(bundles, tiny_model_dir, tmp_path, capsys):
    """export.cli verify reads the manifest: a float16-stored bundle is compared with the release rounded to float16,
    so its graphs match PyTorch as closely as a float32 bundle's do."""
    release = tiny_model_dir / "release"
    codes = {}
    for kind in ("half", "full"):
        report = tmp_path / f"{kind}.json"
        args = ["verify", "--model", str(release), "--bundle", str(bundles[kind]), "--output", str(report)]
        codes[kind] = main(args)
        capsys.readouterr()
        codes[kind] = (codes[kind], max(json.loads(report.read_text())["max_abs_diff"].values()))
    assert codes["half"][0] == 0 and codes["half"][1] <= 1e-4, codes
    assert codes["full"][1] > codes["half"][1]  # the hand-rounded bundle against the unrounded release: it differs


def test_the_bundle_is_also_the_pytorch_release(bundles, tiny_model_dir, tmp_path):
    """graphs/float16.weights is a safetensors file with the parameters under their names: release_from_bundle writes
    the release folder back (the weights the bundle computes with), and load_release reads it."""
    model, _ = load_release(tiny_model_dir / "release")
    round_to_float16(model)
    meta = release_from_bundle(bundles["half"], tmp_path / "release")
    back, config = load_release(tmp_path / "release")
    assert config["model"] == meta["model"] == _manifest(bundles["half"])["model"]
    expected, got = model.state_dict(), back.state_dict()
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    assert (tmp_path / "release" / TOKENIZER_FILE).read_bytes() == (bundles["half"] / TOKENIZER_FILE).read_bytes()
    with pytest.raises(ValueError, match="float16-storage"):
        release_from_bundle(bundles["full"], tmp_path / "refused")
    assert main(["release-from-bundle", "--bundle", str(bundles["full"]), "--out", str(tmp_path / "no")]) == 2
    assert main(["release-from-bundle", "--bundle", str(bundles["half"]), "--out", str(tmp_path / "cli")]) == 0
    written = [(tmp_path / folder / "model.safetensors").read_bytes() for folder in ("cli", "release")]
    assert written[0] == written[1]
