"""Trainer: a run resumed from checkpoints/last.pt takes exactly the step the uninterrupted run takes."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from model_toys import tiny_run

from model.schedule import noam_lr
from model.train import Trainer


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in trainer.model.state_dict().items()}


def _assert_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert not different, f"parameters differ: {different}"


@pytest.mark.parametrize("stop", ["mid_epoch", "end_of_epoch"])
def test_resume_reproduces_the_next_step_of_an_uninterrupted_run(corpus_dir, tmp_path, stop):
    first = Trainer.from_run(tiny_run(), corpus_dir, tmp_path / "a", progress=False)
    per_epoch = len(first.epoch_batches(0))
    assert per_epoch >= 6
    n = 3 if stop == "mid_epoch" else per_epoch
    first.cfg.max_steps = n
    first.train()  # ends with validation + checkpoints/last.pt
    assert first.step == n
    assert (first.epoch, first.batch_in_epoch) == ((0, n) if stop == "mid_epoch" else (1, 0))
    assert (tmp_path / "a" / "checkpoints" / "last.pt").is_file()
    assert (tmp_path / "a" / "checkpoints" / f"step{n:07d}.pt").is_file()
    at_n = _weights(first)

    # (b) an interrupted run: the same folder as it was after step n, picked up by a new Trainer.
    shutil.copytree(tmp_path / "a", tmp_path / "b")

    # (a) the uninterrupted run takes one more step in the same Trainer.
    first.cfg.max_steps = n + 1
    first.train()
    assert first.step == n + 1
    continued = _weights(first)
    with pytest.raises(AssertionError):
        _assert_identical(continued, at_n)  # the step did change the weights

    resumed = Trainer.from_run(tiny_run(max_steps=n + 1), corpus_dir, tmp_path / "b", progress=False)
    assert resumed.step == n
    _assert_identical(_weights(resumed), at_n)
    resumed.train()
    assert resumed.step == n + 1
    assert (resumed.epoch, resumed.batch_in_epoch) == (first.epoch, first.batch_in_epoch)
    _assert_identical(_weights(resumed), continued)

    # Optimizer moments and the learning rate follow too.
    for sa, sb in zip(first.optimizer.state.values(), resumed.optimizer.state.values(), strict=True):
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    cfg = first.run
    expected_lr = noam_lr(n + 2, cfg.model.d_model, cfg.train.warmup_steps, cfg.train.lr_factor)  # for step n + 2
    assert first.scheduler.get_last_lr()[0] == pytest.approx(expected_lr)
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(expected_lr)

    # The history survives the restart: one validation record per train() call.
    assert [r["step"] for r in resumed.history] == [n, n + 1]
    log = (tmp_path / "b" / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in log] == [n, n + 1]
    assert (tmp_path / "b" / "curve.png").is_file() and (tmp_path / "b" / "best" / "model.safetensors").is_file()


def test_a_vocab_size_that_does_not_match_the_tokenizer_is_rejected(corpus_dir, tmp_path):
    run = tiny_run()
    run.model.vocab_size += 1
    with pytest.raises(ValueError, match="vocab_size"):
        Trainer.from_run(run, corpus_dir, tmp_path / "out", progress=False)
