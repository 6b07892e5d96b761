"""scripts/run_bundle.sh on the tiny multilingual run of tests/multi_bundle.py: a run's best/ or one of its training
checkpoints as an int8 bundle of the four English directions with the 4-gram block, for measurements between
releases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
from multi_bundle import cached_multi_build, run_data, source_digest
from safetensors.torch import load_file

from core.bundle import load_bundle
from model.checkpoint import WEIGHTS_FILE, load_training_state

ROOT = Path(__file__).resolve().parents[2]


def run_bundle(build: Path, data: Path, work: Path, step: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "RUN": str(build / "run"), "DATA": str(data), "WORK": str(work)}
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "run_bundle.sh")], env={**env, "STEP": step}, capture_output=True, text=True
    )


def test_a_checkpoint_or_best_becomes_a_bundle(request, tmp_path):
    build = cached_multi_build(Path(request.config.cache.mkdir("mtserve")), source_digest())
    data = run_data(build, tmp_path / "data")
    checkpoint = sorted((build / "run" / "checkpoints").glob("step*.pt"))[-1]
    step = int(checkpoint.stem.removeprefix("step"))

    result = run_bundle(build, data, tmp_path / "ckpt", str(step))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == str(step)
    weights = load_file(str(tmp_path / "ckpt" / "model" / WEIGHTS_FILE))
    trained = load_training_state(checkpoint)["model"]
    assert set(weights) <= set(trained) and all(torch.equal(weights[k], trained[k]) for k in weights)
    manifest = load_bundle(tmp_path / "ckpt" / "repository" / "multi" / "1").manifest
    assert list(manifest["directions"]) == ["de-en", "en-de", "zh-en", "en-zh"]
    assert manifest["decoding"]["no_repeat_ngram_size"] == 4 and "int8" in manifest["variants"]

    best = run_bundle(build, data, tmp_path / "best", "")
    assert best.returncode == 0, best.stderr[-3000:]
    assert (tmp_path / "best" / "repository" / "multi" / "1" / "manifest.json").exists()

    missing = run_bundle(build, data, tmp_path / "none", "123456")
    assert missing.returncode == 2 and "no " in missing.stderr
