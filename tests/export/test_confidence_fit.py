"""The confidence map's fit and calibration measures (export/confidence.py) on data with a known answer."""

from __future__ import annotations

import numpy as np

from core.confidence import confidence, confidence_of, mean_log_prob
from export.confidence import calibration_error, fit_logistic


def test_logistic_fit_recovers_the_parameters_that_made_the_labels():
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 1, 20_000)
    p = 1 / (1 + np.exp(-(2.0 * x + 1.0)))
    y = (rng.random(x.size) < p).astype(float)
    a, b = fit_logistic(x, y)
    assert abs(a - 2.0) < 0.1 and abs(b - 1.0) < 0.1


def test_calibration_error_is_zero_when_confidence_matches_the_rate_and_large_when_not():
    labels = np.array([1, 0, 1, 0] * 50, dtype=float)
    assert calibration_error(np.full(200, 0.5), labels) < 1e-12
    assert abs(calibration_error(np.full(200, 0.95), labels) - 0.45) < 1e-9


def test_confidence_is_the_fitted_map_of_the_mean_log_probability():
    params = {"a": 2.0, "b": 1.0}
    assert mean_log_prob(-3.0, 2) == -1.0
    assert abs(confidence(-3.0, 2, params) - 1 / (1 + np.exp(1.0))) < 1e-12
    assert confidence_of(-1000.0, params) == 0.0 and confidence_of(1000.0, params) == 1.0  # no overflow


def test_the_cli_fits_on_several_splits_as_one(tiny_bundle_dir, tmp_path, capsys):
    import json
    import shutil

    from tiny_bundle import write_corpus

    from export.confidence import main

    corpus = write_corpus(tmp_path / "corpus", n_train=1, n_valid=12, seed=5)
    for lang in ("de", "en"):  # a second fitting split under another name (a general model's other domain)
        shutil.copy(corpus / f"test.{lang}", corpus / f"news.val.{lang}")
    before = (tiny_bundle_dir / "manifest.json").read_bytes()
    args = ["--bundle", str(tiny_bundle_dir), "--data", str(corpus), "--fit-split", "val", "news.val",
            "--test-split", "test", "--beam", "1", "--limit", "10", "--dry-run"]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fit"]["split"] == "val + news.val" and report["fit"]["sentences"] == 20
    assert report["test"]["split"] == "test" and report["test"]["sentences"] == 10
    assert (tiny_bundle_dir / "manifest.json").read_bytes() == before  # --dry-run


def test_the_cli_leaves_out_sources_over_the_model_limit(tiny_bundle_dir, tmp_path, capsys):
    """The service refuses such a source (422), so it has no confidence to fit; the count is in the report."""
    import json

    from tiny_bundle import write_corpus

    from export.confidence import main

    corpus = write_corpus(tmp_path / "corpus", n_train=1, n_valid=12, seed=5)
    lines = (corpus / "val.de").read_text().splitlines()
    lines[0] = " ".join(["Hund"] * 400)  # far past the tiny model's positions
    (corpus / "val.de").write_text("\n".join(lines) + "\n")
    args = ["--bundle", str(tiny_bundle_dir), "--data", str(corpus), "--fit-split", "val", "--test-split", "test",
            "--beam", "1", "--limit", "10", "--dry-run"]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fit"]["sentences"] == 9 and report["fit"]["over_the_source_limit"] == 1
    assert report["test"]["over_the_source_limit"] == 0
