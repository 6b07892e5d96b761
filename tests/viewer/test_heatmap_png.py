"""The PNG export (service.tools.heatmap): plotting without HTTP, and the CLI against the live server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from matplotlib.image import imread
from tiny_bundle import SAMPLE_SENTENCES

from service.tools import heatmap

ROOT = Path(__file__).resolve().parents[2]


def test_render_heatmap_writes_a_png_of_the_promised_size(tmp_path):
    rows, cols = ["▁a", "▁man", "</s>"], ["▁ein", "▁mann", "▁spiel", "t", "</s>"]
    matrix = np.random.default_rng(0).dirichlet(np.ones(len(cols)), size=len(rows))
    out = heatmap.render_heatmap(matrix, rows, cols, tmp_path / "deep" / "map.png", title="test", dpi=80)
    image = imread(out)
    width, height = heatmap.figure_size(len(rows), len(cols))
    assert np.abs(np.subtract(image.shape[:2], (height * 80, width * 80))).max() <= 1  # matplotlib truncates
    assert image[..., :3].std() > 0.05, "the image is not blank"
    bigger = imread(heatmap.render_heatmap(np.ones((8, 12)) / 12, ["x"] * 8, ["y"] * 12, tmp_path / "big.png", dpi=80))
    assert bigger.shape[0] > image.shape[0] and bigger.shape[1] > image.shape[1]


def test_render_heatmap_refuses_mismatched_tokens(tmp_path):
    with pytest.raises(ValueError, match="2 x 3 tokens"):
        heatmap.render_heatmap(np.zeros((3, 2)), ["a", "b"], ["c", "d", "e"], tmp_path / "x.png")


def test_select_and_labels_follow_the_viewer():
    layers = [[[[0.2, 0.8]], [[0.6, 0.4]]]]  # [layers][heads][rows][cols]
    np.testing.assert_allclose(heatmap.select(layers, 0, "mean"), [[0.4, 0.6]])
    np.testing.assert_allclose(heatmap.select(layers, 0, 1), [[0.6, 0.4]])
    attention = {"source_tokens": ["▁ein", "</s>"], "target_tokens": ["<s>", "▁a"]}
    assert heatmap.token_labels(attention, "cross") == (["▁a", "</s>"], ["▁ein", "</s>"])
    assert heatmap.token_labels(attention, "decoder") == (["<s>", "▁a"], ["<s>", "▁a"])
    detail = [{"loc": ["body", "texts", 0], "msg": "too long"}, {"loc": ["body", "beam_size"], "msg": "too big"}]
    assert heatmap.describe_detail(detail) == "texts: too long; beam_size: too big"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "service.tools.heatmap", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_cli_writes_the_api_map_as_png(live_server, tmp_path):
    sentence = SAMPLE_SENTENCES[1]
    out = tmp_path / "cross.png"
    done = _cli("--url", live_server.url, "--source", sentence, "--head", "1", "--out", str(out), "--dpi", "60")
    assert done.returncode == 0, done.stderr
    translated = httpx.post(live_server.url + "/v1/translate", json={"texts": [sentence]}).json()["translations"][0]
    att = httpx.post(live_server.url + "/v1/attention", json={"source": sentence, "target": translated["text"]}).json()
    rows, cols = len(att["target_tokens"]), len(att["source_tokens"])
    assert f"wrote {out} ({rows} x {cols}, cross, layer 0, head 1)" in done.stdout
    image = imread(out)
    width, height = heatmap.figure_size(rows, cols)
    assert np.abs(np.subtract(image.shape[:2], (height * 60, width * 60))).max() <= 1
    assert image[..., :3].std() > 0.05


def test_cli_reports_bad_choices_and_api_errors(live_server, tmp_path):
    out = tmp_path / "x.png"
    done = _cli("--url", live_server.url, "--source", "der hund", "--head", "7", "--out", str(out))
    assert done.returncode == 2 and "--head 7: the model has 2 heads" in done.stderr
    done = _cli("--url", live_server.url, "--source", "der hund", "--beam-size", "99", "--out", str(out))
    assert done.returncode == 1 and "HTTP 422" in done.stderr and "beam_size: " in done.stderr
    assert not out.exists()
