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


def test_save_minutes_writes_last_between_validations_and_a_killed_run_resumes_from_it(
    corpus_dir, tmp_path, monkeypatch
):
    import model.train as train_module

    clock = [1000.0]
    real_time = train_module.time.time

    def fake_time() -> float:  # every call is a minute later: each step passes the one-minute mark
        clock[0] += 60.0
        return clock[0]

    saves = []
    trainer = Trainer.from_run(tiny_run(max_steps=4, save_minutes=1.0), corpus_dir, tmp_path / "a", progress=False)
    original_save = trainer.save
    trainer.save = lambda last_only=False: (saves.append((trainer.step, last_only)), original_save(last_only))[1]
    monkeypatch.setattr(train_module.time, "time", fake_time)
    trainer.train()
    monkeypatch.setattr(train_module.time, "time", real_time)
    # steps 1-3 save last.pt only; step 4 is the end of the run: validation, last.pt and step0000004.pt
    assert saves == [(1, True), (2, True), (3, True), (4, False)]
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").glob("step*.pt")) == ["step0000004.pt"]

    # a run killed after a minute-save resumes from that step, not from the last validation
    killed = Trainer.from_run(tiny_run(max_steps=2, save_minutes=1.0), corpus_dir, tmp_path / "b", progress=False)
    monkeypatch.setattr(train_module.time, "time", fake_time)
    killed._train_started = real_time()
    killed.cfg.max_steps = 100
    steps = iter(range(3))
    step = killed.train_step

    def stop_after_two(batch):
        if next(steps) == 2:
            raise KeyboardInterrupt  # the session's end, between a save and the next validation
        return step(batch)

    killed.train_step = stop_after_two
    with pytest.raises(KeyboardInterrupt):
        killed._train()
    monkeypatch.setattr(train_module.time, "time", real_time)
    resumed = Trainer.from_run(tiny_run(max_steps=100), corpus_dir, tmp_path / "b", progress=False)
    assert resumed.step == 2 and not list((tmp_path / "b" / "checkpoints").glob("step*.pt"))
    _assert_identical(_weights(resumed), _weights(killed))


# The keys Trainer.state() wrote before accumulation, streamed shards and elastic runs (checkpoints of runs
# started then, e.g. a long run resumed by this code), and the keys of its "rng" entry.
OLD_STATE_KEYS = {
    "model",
    "optimizer",
    "scheduler",
    "step",
    "epoch",
    "batch_in_epoch",
    "rng",
    "history",
    "best_bleu",
    "run_config",
    "train_seconds",
}
OLD_RNG_KEYS = {"torch", "python", "numpy", "numpy_pos"}


@pytest.mark.parametrize("autocast", ["", "bf16"])
def test_a_checkpoint_in_the_old_state_layout_resumes_exactly(corpus_dir, tmp_path, autocast):
    """Same step, epoch, batch position, RNG, optimizer and schedule: the next step is the uninterrupted one."""
    from model.checkpoint import load_training_state, save_training_state

    n = 3
    first = Trainer.from_run(tiny_run(max_steps=n, autocast=autocast), corpus_dir, tmp_path / "a", progress=False)
    first.train()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    last = tmp_path / "b" / "checkpoints" / "last.pt"
    state = load_training_state(last)
    old = {key: state[key] for key in OLD_STATE_KEYS}
    old["rng"] = {key: state["rng"][key] for key in OLD_RNG_KEYS}
    save_training_state(last, old)
    assert set(load_training_state(last)) == OLD_STATE_KEYS

    first.cfg.max_steps = n + 2
    first.train()

    resumed = Trainer.from_run(tiny_run(max_steps=n + 2, autocast=autocast), corpus_dir, tmp_path / "b", progress=False)
    assert (resumed.step, resumed.epoch, resumed.batch_in_epoch) == (n, 0, n)
    assert resumed.source.identity.startswith("in-memory ")  # no shards: the data path the checkpoint was made on
    assert torch.equal(torch.get_rng_state(), old["rng"]["torch"])  # dropout goes on with the saved stream
    resumed.train()
    assert (resumed.step, resumed.epoch, resumed.batch_in_epoch) == (first.step, first.epoch, first.batch_in_epoch)
    _assert_identical(_weights(resumed), _weights(first))
    for sa, sb in zip(first.optimizer.state.values(), resumed.optimizer.state.values(), strict=True):
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    assert resumed.scheduler.get_last_lr() == first.scheduler.get_last_lr()
    # the checkpoint it writes now says how many ranks counted the position
    assert load_training_state(tmp_path / "b" / "checkpoints" / "last.pt")["world"] == 1
