"""A one-process run whose heap the malloc tunables fragmented (model/malloc_tuning.py) writes last.pt and starts
the same command again, which resumes there; several processes never do, and the end of a run never does."""

from __future__ import annotations

import json
import sys

import pytest
from model_toys import tiny_run

import model.cli
import model.train
from model.checkpoint import load_training_state
from model.malloc_tuning import RestartForMemory
from model.train import Trainer


def _fragmented(monkeypatch, at_save: int = 1) -> list[int]:
    saves: list[int] = []

    def measured():
        saves.append(1)
        return (15 * 10**9, 9 * 10**9) if len(saves) >= at_save else None

    monkeypatch.setattr(model.train, "restart_for_memory", measured)
    return saves


def test_a_fragmented_heap_stops_the_run_after_last_pt_is_written(corpus_dir, tmp_path, monkeypatch):
    _fragmented(monkeypatch, at_save=2)
    trainer = Trainer.from_run(tiny_run(save_minutes=1e-9), corpus_dir, tmp_path / "run", progress=False)
    with pytest.raises(RestartForMemory, match="15.0 GB, 9.0 GB of it in free heap chunks") as restart:
        trainer.train()
    assert restart.value.step == 2  # the second save
    assert load_training_state(tmp_path / "run" / "checkpoints" / "last.pt")["step"] == 2
    assert not (tmp_path / "run" / "release").exists()


def test_the_end_of_a_run_and_a_multi_process_run_do_not_restart(corpus_dir, tmp_path, monkeypatch):
    _fragmented(monkeypatch)
    trainer = Trainer.from_run(tiny_run(max_steps=3), corpus_dir, tmp_path / "run", progress=False)
    trainer.train()  # the only save is the last checkpoint
    assert trainer.step == 3
    several = Trainer.from_run(tiny_run(max_steps=3, save_minutes=1e-9), corpus_dir, tmp_path / "two", progress=False)
    several.world = 2  # what a rank of a torchrun run has: it must not leave the others alone
    several.save(last_only=True)
    assert several.memory_restart is None


def test_the_command_runs_itself_again_with_the_same_arguments(corpus_dir, tmp_path, monkeypatch, capsys):
    _fragmented(monkeypatch)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_run(save_minutes=1e-9).to_dict()))
    argv = ["train", "--config", str(config), "--data", str(corpus_dir), "--out", str(tmp_path / "r"), "--no-progress"]
    executed = []

    def execv(path, args):
        executed.append((path, args))
        raise SystemExit(0)

    monkeypatch.setattr(model.cli.os, "execv", execv)
    with pytest.raises(SystemExit):
        model.cli.main(argv)
    assert executed == [(sys.executable, [sys.executable, "-m", "model.cli", *argv])]
    assert "restarting from last.pt at step 1" in capsys.readouterr().err
