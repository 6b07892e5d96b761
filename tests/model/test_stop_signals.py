"""Ctrl-C or SIGTERM stops a training run after the step in progress with last.pt written, and the same command
resumes from it: in process with a real signal, and through ``python -m model.cli train`` in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from model_toys import tiny_run

from model.checkpoint import load_training_state
from model.cli import main
from model.stop_signals import StopRequest, TrainingStopped, stop_on_signals
from model.train import Trainer

ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_finishes_the_step_writes_last_pt_and_the_run_resumes_there(corpus_dir, tmp_path, monkeypatch):
    trainer = Trainer.from_run(tiny_run(), corpus_dir, tmp_path / "run", progress=False)
    real_step = trainer.train_step

    def step_then_signal(batches):
        loss = real_step(batches)
        if trainer.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # delivered to the handler train() installed
        return loss

    monkeypatch.setattr(trainer, "train_step", step_then_signal)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingStopped) as stopped:
        trainer.train()
    assert (stopped.value.step, stopped.value.exit_code) == (2, 128 + signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before  # the old handler is back
    state = load_training_state(tmp_path / "run" / "checkpoints" / "last.pt")
    assert state["step"] == 2 and not list((tmp_path / "run" / "checkpoints").glob("step*.pt"))
    assert not (tmp_path / "run" / "release").exists()  # a stopped run is not finalized

    resumed = Trainer.from_run(tiny_run(), corpus_dir, tmp_path / "run", progress=False)
    assert resumed.resume_if_present() and resumed.step == 2
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name])


def test_a_second_ctrl_c_stops_at_once_and_other_threads_or_ranks_keep_the_default():
    with stop_on_signals() as request:
        request._handle(signal.SIGINT, None)
        assert request.signum == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            request._handle(signal.SIGINT, None)
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals(enabled=False) as request:
        assert isinstance(request, StopRequest) and signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_stops_the_command_line_run_with_last_pt_and_exit_130(corpus_dir, tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_run(epochs=1000, save_minutes=0.0001).to_dict()))  # last.pt after every step
    out = tmp_path / "run"
    command = [sys.executable, "-m", "model.cli", "train", "--config", str(config), "--data", str(corpus_dir),
               "--out", str(out), "--no-progress"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), MTSERVE_MALLOC="default")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    last = out / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 120
    while not last.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert last.exists(), "the run wrote no last.pt"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "SIGINT: stopping after this step and writing last.pt" in stderr
    assert "last.pt written; the same command resumes from it" in stderr
    step = load_training_state(last)["step"]
    assert f"stopped after step {step}," in stderr and step >= 1


def test_the_cli_returns_the_signal_exit_code(corpus_dir, tmp_path, monkeypatch, capsys):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_run().to_dict()))

    def stopped(self):
        raise TrainingStopped(signal.SIGTERM, 5)

    monkeypatch.setattr(Trainer, "train", stopped)
    argv = ["train", "--config", str(config), "--data", str(corpus_dir), "--out", str(tmp_path / "r"), "--no-progress"]
    assert main(argv) == 143
    assert "SIGTERM: stopped after step 5, last.pt written; the same command resumes" in capsys.readouterr().err
