"""``python -m export.cli``: the tiny bundle made by ``export`` (session fixture), then ``verify``, ``evaluate``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from tiny_bundle import write_corpus

from core.bundle import load_bundle
from export.cli import main
from export.pack import storage
from model.checkpoint import load_release

ROOT = Path(__file__).resolve().parents[2]
QUANTIZED_OPS = {"QuantizeLinear", "MatMulIntegerToFloat"}  # static int8; the dynamic ops must not appear
DYNAMIC_OPS = {"DynamicQuantizeLinear", "DynamicQuantizeMatMul"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The tiny model's kind of data: ``test.de`` / ``test.en`` (20 lines, other seed than training)."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=1, n_valid=20, seed=7)


def _op_types(path: Path) -> set[str]:
    return {node.op_type for node in onnx.load(str(path)).graph.node}


def test_export_wrote_a_bundle_of_the_release(tiny_model_dir, tiny_bundle_dir):
    release = tiny_model_dir / "release"
    model, meta = load_release(release)
    bundle = load_bundle(tiny_bundle_dir)
    m = bundle.manifest
    assert m["model"] == meta["model"] == model.cfg.to_dict()
    assert m["parameters"] == model.num_parameters()
    assert (tiny_bundle_dir / "tokenizer.model").read_bytes() == (release / "tokenizer.model").read_bytes()
    assert set(bundle.variants) == {"fp32", "int8"}
    for graph in ("encoder", "decoder"):
        fp32, int8 = bundle.graph("fp32", graph), bundle.graph("int8", graph)
        assert not _op_types(fp32) & QUANTIZED_OPS
        assert _op_types(int8) >= QUANTIZED_OPS, f"{int8} has no quantized operator"
        assert not _op_types(int8) & DYNAMIC_OPS, f"{int8} computes activation scales at run time"
    stored = storage(tiny_bundle_dir, m)["variants"]  # bytes of the variant's own weights file
    assert 0 < stored["int8"]["weights"] < stored["fp32"]["weights"] / 2


def test_export_refuses_to_overwrite_without_force(tiny_model_dir, tiny_bundle_dir, tmp_path, capsys):
    out = shutil.copytree(tiny_bundle_dir, tmp_path / "1")
    before = (out / "manifest.json").read_bytes()
    args = ["export", "--model", str(tiny_model_dir / "release"), "--out", str(out), "--name", "de-en"]
    assert main([*args, "--variants", "fp32"]) == 2
    assert "--force" in capsys.readouterr().err
    assert (out / "manifest.json").read_bytes() == before


def test_int8_export_needs_calibration_sentences(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "1"
    code = main(["export", "--model", str(tiny_model_dir / "release"), "--out", str(out), "--name", "x"])
    assert code == 2 and "--calibration-data" in capsys.readouterr().err
    assert not out.exists()  # refused before any work


def test_int8_manifest_says_how_it_was_quantized(tiny_bundle_dir):
    entry = load_bundle(tiny_bundle_dir).manifest["variants"]["int8"]
    q = entry["quantization"]
    assert q["method"] == "static" and q["batch_independent"] is True
    assert q["calibration"] == {"file": "train.de", "sentences": 64, "seed": 0}


def test_int8_scales_are_constants_of_the_graph(tiny_bundle_dir):
    """Every QuantizeLinear of an activation takes its scale and zero point from initializers (fixed at export)."""
    bundle = load_bundle(tiny_bundle_dir)
    for graph in ("encoder", "decoder", "decoder_step"):
        model = onnx.load(str(bundle.graph("int8", graph)))
        constants = {i.name for i in model.graph.initializer}
        quantize = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
        assert quantize, graph
        assert all(n.input[1] in constants and n.input[2] in constants for n in quantize), graph


def test_verify_reports_parity_of_graphs_and_translations(tiny_model_dir, tiny_bundle_dir, corpus, tmp_path):
    report_path = tmp_path / "verify.json"
    args = ["verify", "--bundle", str(tiny_bundle_dir), "--model", str(tiny_model_dir / "release")]
    args += ["--shapes", "6", "--data", str(corpus), "--split", "test", "--output", str(report_path)]
    assert main(args) == 0
    report = json.loads(report_path.read_text())
    assert max(report["max_abs_diff"].values()) <= 1e-4
    limit = load_bundle(tiny_bundle_dir).model_config["max_positions"]
    assert all(src <= limit and past + tgt <= limit for _, src, tgt, past in report["shapes"])
    for beam in ("beam1", "beam4"):
        assert report[beam]["total"] == 20
        assert report[beam]["identical"] == 20, report[beam]["differing"]


def test_verify_runs_as_a_module(tiny_model_dir, tiny_bundle_dir):
    command = [sys.executable, "-m", "export.cli", "verify", "--bundle", str(tiny_bundle_dir)]
    command += ["--model", str(tiny_model_dir / "release"), "--shapes", "2"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["max_abs_diff"]) >= {"encoder_output", "decoder.log_probs"}


def test_verify_fails_on_weights_that_are_not_the_bundles(tiny_model_dir, tiny_bundle_dir, tmp_path):
    """Another model's weights behind the same graphs: verify returns 1."""
    from safetensors.torch import save_model

    model, _ = load_release(tiny_model_dir / "release")
    other = shutil.copytree(tiny_model_dir / "release", tmp_path / "release")
    for p in model.parameters():
        p.data.mul_(1.5)
    save_model(model, str(other / "model.safetensors"))
    args = ["verify", "--bundle", str(tiny_bundle_dir), "--model", str(other), "--shapes", "2"]
    assert main(args) == 1


def test_evaluate_records_bleu_of_every_variant_and_reseals(tiny_bundle_dir, corpus, tmp_path):
    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "1")
    args = ["evaluate", "--bundle", str(bundle_dir), "--data", str(corpus), "--split", "test", "--beam", "1"]
    assert main(args) == 0
    manifest = load_bundle(bundle_dir).manifest  # still verifies: evaluate sealed it again
    for variant in ("fp32", "int8"):
        bleu = manifest["variants"][variant]["bleu"]
        assert bleu["split"] == "test"
        assert 0.0 <= bleu["beam1"]["bleu"] <= 100.0 and bleu["beam1"]["signature"]
    assert manifest["variants"]["fp32"]["bleu"]["beam1"]["bleu"] > 20  # the tiny model learned its toy task
    fp32, int8 = (manifest["variants"][v]["bleu"]["beam1"]["bleu"] for v in ("fp32", "int8"))
    within = fp32 - int8 <= 0.5
    assert manifest["variants"]["int8"]["within_bleu_budget"] == within
    assert manifest["variants"]["int8"]["quantization"]["batch_independent"] is True
    assert manifest["default_variant"] == ("int8" if within else "fp32")  # static int8 within budget is the default
    assert "default_variant_rule" in manifest


def test_evaluate_scores_several_splits_into_a_report_and_no_seal_leaves_the_manifest(
    tiny_bundle_dir, corpus, tmp_path
):
    bundle_dir = shutil.copytree(tiny_bundle_dir, tmp_path / "1")
    for name in ("test", "other"):  # a second split under another name, its source file found by language
        for lang in ("de", "en"):
            shutil.copy(corpus / f"val.{lang}", tmp_path / f"{name}.{lang}")
    with open(tmp_path / "long.de", "w") as de, open(tmp_path / "long.en", "w") as en:  # over the model's limit
        de.write("der mann spielt " * 200 + "\n")
        en.write("the man plays " * 200 + "\n")
    before = (bundle_dir / "manifest.json").read_bytes()
    report = tmp_path / "report.json"
    args = ["evaluate", "--bundle", str(bundle_dir), "--data", str(tmp_path), "--split", "test", "other", "long",
            "--beam", "1", "--variants", "fp32", "--report", str(report), "--no-seal",
            "--hypotheses", str(tmp_path / "hyp")]  # fmt: skip
    assert main(args) == 0
    assert (bundle_dir / "manifest.json").read_bytes() == before
    scores = json.loads(report.read_text())["fp32"]
    assert set(scores) == {"test", "other", "long"}
    assert scores["test"]["beam1"]["bleu"] == scores["other"]["beam1"]["bleu"]
    assert scores["test"]["beam1"]["loops"] == 0 and scores["test"]["beam1"]["n_sentences"] == 20
    assert scores["long"]["beam1"]["truncated_sources"] == 1 and scores["test"]["beam1"]["truncated_sources"] == 0
    assert len((tmp_path / "hyp.fp32.other.beam1").read_text().splitlines()) == 20

    assert main([a for a in args if a != "--no-seal"]) == 0  # sealed: the first split is the headline
    entry = load_bundle(bundle_dir).manifest["variants"]["fp32"]
    assert entry["bleu"]["split"] == "test" and set(entry["evaluations"]) == {"test", "other", "long"}
