"""The whole chain as a new user runs it, through the command lines, on a tiny corpus this test writes:
train 20 steps (validation limited), export, evaluate and verify with --limit, then serve and translate.
It must stay a smoke run: under 2 minutes on the 2-core CI machine."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
from live_server import LiveServer
from tiny_bundle import write_corpus

from model.config import ModelConfig, RunConfig, TokenizerConfig, TrainConfig

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=None
    )
    assert result.returncode == 0, f"{args[:2]}: {result.stderr[-2000:]}"
    return result.stdout


def test_train_export_evaluate_verify_serve_in_under_two_minutes(tmp_path):
    started = time.monotonic()
    corpus = write_corpus(tmp_path / "corpus", n_train=400, n_valid=30)
    config = RunConfig(
        name="smoke",
        tokenizer=TokenizerConfig(vocab_size=320),
        model=ModelConfig(vocab_size=320, d_model=32, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=64),
        train=TrainConfig(max_tokens=400, warmup_steps=10, epochs=50, eval_every=10, keep_checkpoints=2, threads=1),
    )
    (tmp_path / "smoke.json").write_text(json.dumps(config.to_dict()))
    out, bundle = tmp_path / "run", tmp_path / "repository" / "smoke" / "1"
    summary = run(
        "model.cli",
        "train",
        "--config",
        str(tmp_path / "smoke.json"),
        "--data",
        str(corpus),
        "--out",
        str(out),
        "--max-steps",
        "20",
        "--val-limit",
        "5",
        "--no-progress",
    )
    lines = summary.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")  # the summary, printed last and indented
    assert json.loads("\n".join(lines[start:]))["train_seconds"] > 0
    run(
        "export.cli",
        "export",
        "--model",
        str(out / "release"),
        "--out",
        str(bundle),
        "--name",
        "smoke",
        "--variants",
        "fp32",
        "int8",
        "--calibration-data",
        str(corpus / "train.de"),
        "--calibration-sentences",
        "16",
    )
    run(
        "export.cli",
        "evaluate",
        "--bundle",
        str(bundle),
        "--data",
        str(corpus),
        "--split",
        "test",
        "--beam",
        "1",
        "--limit",
        "5",
    )
    run(
        "export.cli",
        "verify",
        "--bundle",
        str(bundle),
        "--model",
        str(out / "release"),
        "--data",
        str(corpus),
        "--split",
        "test",
        "--beam",
        "1",
        "--limit",
        "5",
        "--output",
        str(tmp_path / "parity.json"),
    )
    assert json.loads((tmp_path / "parity.json").read_text())["beam1"]["total"] == 5
    with LiveServer(bundle.parent.parent, env={"MT_DEFAULT_MODEL": "smoke"}, log_path=tmp_path / "log") as server:
        answer = httpx.post(server.url + "/v1/translate", json={"texts": ["der hund"]}, timeout=60)
        assert answer.status_code == 200 and answer.json()["model"] == "smoke"
    assert time.monotonic() - started < 120
