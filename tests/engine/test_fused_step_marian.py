"""The fused step on imported Hugging Face Marian (OPUS-MT) bundles: post-norm layers, swish / GELU / ReLU, an output
bias and a banned id (engine/fused_step_layout.py), against the int8 step graph it replaces, against the fp32 graphs
(which give transformers' ``generate`` tokens: tests/export/test_marian_import.py), and each sentence's answer the
same alone, in a batch and in the live decode.

The bundles: small random MarianMTModels (tests/marian_checkpoint.py) imported with an int8 variant calibrated on
generated sentences. A random model's activations are large, so int8 rounding moves its translations more than a
trained model's: the fused path is held to the graph path's own agreement with fp32, not to exact equality.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from exact_int8 import exact_int8_model
from marian_checkpoint import SOURCE_WORDS, sentences, write_checkpoint

from core.bundle import load_bundle
from core.graphs import step_input_names
from engine import Engine
from engine.decoding import TranslateOptions
from engine.fused_step import LIBRARY_ENV
from engine.fused_step_graph import NotFused, fused_search_graph, fused_step_graph
from engine.runtime import create_session
from export.cli import main as export_main

pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]
# OPUS-MT's choices (swish, scaled embeddings, tied), MarianConfig's defaults (GELU, unscaled, untied), ReLU with
# three decoder layers: tests/export/test_marian_import.py's CONFIGS
CONFIGS = {
    "opus-mt": dict(drop_source_pieces=3, eos_bias=3.5),
    "gelu-untied": dict(activation_function="gelu", scale_embedding=False, tie_word_embeddings=False, eos_bias=6.0),
    "relu": dict(activation_function="relu", encoder_layers=1, decoder_layers=3, eos_bias=4.5),
}
ACTIVATION = {"opus-mt": 1, "gelu-untied": 2, "relu": 0}  # the fused node's attribute
MAX_LENGTH = 39
TEXTS = sentences(SOURCE_WORDS, 60, seed=11)


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler (scripts/install-test-tools.sh installs gcc)")
    out = tmp_path_factory.mktemp("native") / "libmtserve_fused_step.so"
    subprocess.run(["bash", str(ROOT / "native" / "build.sh"), str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def marian(request, tmp_path_factory) -> tuple[str, Path]:
    """(config name, the imported bundle with fp32 and int8 variants)."""
    root = tmp_path_factory.mktemp(f"marian-{request.param}")
    checkpoint = write_checkpoint(root / "checkpoint", **CONFIGS[request.param])
    calibration = root / "calibration.de"
    calibration.write_text("\n".join(sentences(SOURCE_WORDS, 200, seed=3)) + "\n")
    args = ["import-hf", "--from", str(checkpoint), "--name", "marian", "--version", "1"]
    args += ["--repository", str(root / "repository"), "--variants", "fp32", "int8"]
    assert export_main([*args, "--calibration-data", str(calibration)]) == 0
    return request.param, root / "repository" / "marian" / "1"


def _fused_node(model: bytes, op_type: str) -> onnx.NodeProto:
    return next(n for n in onnx.load_from_string(model).graph.node if n.op_type == op_type)


def test_the_marian_step_graphs_are_fused_with_their_layout(marian):
    name, bundle_dir = marian
    bundle = load_bundle(bundle_dir)
    for model, op_type in (
        (fused_step_graph(bundle.graph("int8", "decoder_step_batch")), "FusedDecoderStep"),
        (fused_search_graph(bundle.graph("int8", "decoder_loop")), "FusedSearch"),
    ):
        attributes = {a.name: a.i for a in _fused_node(model, op_type).attribute if a.name != "epsilon"}
        want = {"post_norm": 1, "output_bias": 1, "banned": 1} | (
            {"activation": ACTIVATION[name]} if name != "relu" else {}
        )
        assert {k: v for k, v in attributes.items() if k not in ("layers", "heads", "eos")} == want
        assert attributes["layers"] == bundle.model_config["n_decoder_layers"]
    with pytest.raises(NotFused, match="MatMul"):  # the fp32 graph is still not the operator's
        fused_step_graph(bundle.graph("fp32", "decoder_step_batch"))


def _feeds(cfg: dict, rng, rows_per_source=(2, 1, 3), past=5, src=7) -> dict[str, np.ndarray]:
    """A ragged step's inputs (rows of different sources, a shorter source, a younger row)."""
    layers, heads, d = cfg["n_decoder_layers"], cfg["n_heads"], cfg["d_model"]
    group, sources = max(rows_per_source), len(rows_per_source)
    row_source = rng.permutation(np.concatenate([np.full(n, s) for s, n in enumerate(rows_per_source)]))
    rows = len(row_source)
    query_rows, row_slots = np.zeros((sources, group), np.int64), np.zeros(rows, np.int64)
    for s in range(sources):
        mine = np.flatnonzero(row_source == s)
        query_rows[s] = np.resize(mine, group)
        row_slots[mine] = s * group + np.arange(len(mine))
    src_mask = np.ones((sources, src), bool)
    src_mask[1, 4:] = False
    self_mask = np.ones((rows, past + 1), bool)
    self_mask[0, :2] = False
    feeds = {
        "tokens": rng.integers(4, cfg["vocab_size"], size=(rows, 1)).astype(np.int64),
        "src_mask": src_mask,
        "top_k": np.array([4], np.int64),
        "positions": (self_mask.sum(1, keepdims=True) - 1).astype(np.int64),
        "self_mask": self_mask,
        "query_rows": query_rows,
        "row_slots": row_slots,
    }
    shapes = {"cross": (sources, heads, src, d // heads), "past": (rows, heads, past, d // heads)}
    for i in range(layers):
        for kind in ("cross", "past"):
            for what in ("keys", "values"):
                feeds[f"{kind}_{what}_{i}"] = rng.normal(0, 1, shapes[kind]).astype(np.float32)
    feeds = {name: feeds[name] for name in step_input_names(layers, 3)}
    return feeds


def test_the_fused_step_computes_the_marian_step_graph(marian, library):
    """Against the step graph with exact int8 products (exact_int8.py): log-probabilities within the quantization's
    rounding (a random model's activations are large), the banned id (Marian's pad, our BOS) -inf in both, the best
    token mostly the same, the presents the past plus the new column."""
    _, bundle_dir = marian
    bundle = load_bundle(bundle_dir)
    path = bundle.graph("int8", "decoder_step_batch")
    exact = create_session(path, "cpu", model=exact_int8_model(path))
    fused = create_session(path, "cpu", model=fused_step_graph(path), custom_ops=library)
    names = [o.name for o in exact.get_outputs()]
    rng = np.random.default_rng(7)
    agree = []
    for _ in range(4):
        feeds = _feeds(bundle.model_config, rng)
        want = dict(zip(names, exact.run(None, feeds), strict=True))
        got = dict(zip(names, fused.run(None, feeds), strict=True))
        banned = bundle.model_config["banned_ids"]
        assert np.all(np.isneginf(got["log_probs"][:, banned])) and np.all(np.isneginf(want["log_probs"][:, banned]))
        finite = np.isfinite(want["log_probs"])
        np.testing.assert_array_equal(np.isfinite(got["log_probs"]), finite)
        np.testing.assert_allclose(got["log_probs"][finite], want["log_probs"][finite], atol=0.5)
        # normalized before the ban (Marian's bad_words_ids after the log-softmax): the banned id's mass is gone
        np.testing.assert_allclose(np.exp(got["log_probs"]).sum(1), np.exp(want["log_probs"]).sum(1), atol=0.02)
        agree += list(got["top_ids"][:, 0] == want["top_ids"][:, 0])
        for i in range(bundle.model_config["n_decoder_layers"]):
            for kind in ("keys", "values"):
                np.testing.assert_array_equal(got[f"present_{kind}_{i}"][:, :, :-1], feeds[f"past_{kind}_{i}"])
                np.testing.assert_allclose(got[f"present_{kind}_{i}"], want[f"present_{kind}_{i}"], atol=0.2)
    assert np.mean(agree) >= 0.8


def _agreement(want, got) -> float:
    return float(np.mean([a.token_ids == b.token_ids for a, b in zip(want, got, strict=True)]))


def test_fused_translations_agree_with_fp32_as_the_graphs_do(marian, library, monkeypatch):
    """Greedy and beam 4: the int8 fused path's tokens agree with fp32's (transformers' generate tokens,
    tests/export/test_marian_import.py) about as often as the int8 graphs' do, and with the int8 graphs' mostly."""
    monkeypatch.setenv(LIBRARY_ENV, str(library))
    bundle = load_bundle(marian[1])
    fp32 = Engine(bundle, "fp32", "cpu")
    graph = Engine(bundle, "int8", "cpu", fused_step=False)
    fused = Engine(bundle, "int8", "cpu", fused_step=True)
    assert fused.fused_step == "fused" and graph.fused_step == "off"
    for beam in (1, 4):
        options = TranslateOptions(beam_size=beam, max_length=MAX_LENGTH, length_penalty=0.0)
        want, by_graph, by_fused = (engine.translate(TEXTS, options) for engine in (fp32, graph, fused))
        graph_rate, fused_rate = _agreement(want, by_graph), _agreement(want, by_fused)
        assert fused_rate >= graph_rate - 0.05, (beam, graph_rate, fused_rate)
        assert _agreement(by_graph, by_fused) >= 0.9, beam


def test_every_path_gives_each_marian_sentence_its_alone_answer(marian, library, monkeypatch):
    """Issue 56 on an imported bundle: a sentence's tokens and score are the same alone (the fused search loop), in a
    whole batch (the fused search, and step by step on the fused step) and live beside sentences joining at other
    steps (the continuous decode), with and without the n-gram block."""
    from engine.live import LiveBatch

    monkeypatch.setenv(LIBRARY_ENV, str(library))
    bundle = load_bundle(marian[1])
    loop = Engine(bundle, "int8", "cpu", fused_step=True)
    steps = Engine(bundle, "int8", "cpu", fused_step=True, search_loop=False)
    assert loop.fused_step == "fused" and loop.live_step is loop.step_decoder
    texts = TEXTS[:8]
    for beam, block in ((1, 0), (4, 0), (3, 2)):
        options = TranslateOptions(beam_size=beam, no_repeat_ngram_size=block, max_length=MAX_LENGTH)
        alone = [loop.translate([s], options)[0] for s in texts]
        live, results = LiveBatch(loop), {}
        joining = {0: [0, 1], 1: [2], 3: [3, 4, 5], 4: [6], 6: [7]}  # step -> sentences joining before it
        step = 0
        while len(live) or any(at >= step for at in joining):
            items = [(i, loop.source_ids([texts[i]])[0], options, False) for i in joining.get(step, [])]
            results.update(live.add(items)[0])
            results.update(live.step().finished)
            step += 1
        paths = {
            "batch": loop.translate(texts, options),
            "batch, step by step": steps.translate(texts, options),
            "live": [results[i] for i in range(len(texts))],
        }
        for path, got in paths.items():
            for want, have in zip(alone, got, strict=True):
                assert have.token_ids == want.token_ids, (path, beam, block, want.text, have.text)
                assert have.score == pytest.approx(want.score, abs=1e-6), (path, beam, block)
