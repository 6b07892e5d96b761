"""A run resumed on changed training pairs (``model.cli train --new-data``, e.g. after back-translations were added):
in-memory data has an identity that names its pairs, so a mid-epoch resume on other pairs is refused unless the
flag says so, and then the next epoch starts on the new pairs; checkpoints that recorded the old "in-memory"
identity resume on any in-memory data as before."""

from __future__ import annotations

import shutil

import pytest
from model_toys import tiny_run, write_corpus

from model.checkpoint import load_training_state, save_training_state
from model.data import IN_MEMORY
from model.train import Trainer


def _first_run(tmp_path, steps: int = 3) -> tuple:
    corpus = write_corpus(tmp_path / "corpus")
    trainer = Trainer.from_run(tiny_run(max_steps=steps), corpus, tmp_path / "run", progress=False)
    trainer.train()
    assert (trainer.step, trainer.epoch, trainer.batch_in_epoch) == (steps, 0, steps)  # mid-epoch
    return corpus, trainer


def _grown(tmp_path, corpus):
    """The corpus with 40 more training pairs, as a back-translated corpus would add them."""
    grown = tmp_path / "grown"
    shutil.copytree(corpus, grown)
    more = write_corpus(tmp_path / "more", n_train=40, seed=9)
    for language in ("de", "en"):
        with (grown / f"train.{language}").open("a", encoding="utf-8") as f:
            f.write((more / f"train.{language}").read_text(encoding="utf-8"))
    return grown


def test_in_memory_data_is_named_by_its_pairs(tmp_path):
    corpus, first = _first_run(tmp_path)
    again = Trainer.from_run(tiny_run(max_steps=5), corpus, tmp_path / "run", progress=False)
    assert again.source.identity == first.source.identity and again.source.identity.startswith(IN_MEMORY + " ")
    assert (again.step, again.batch_in_epoch) == (3, 3)  # the same pairs: resumed where it stopped
    grown = Trainer.from_run(tiny_run(max_steps=5), _grown(tmp_path, corpus), tmp_path / "other", progress=False)
    assert grown.source.identity != first.source.identity


def test_a_mid_epoch_resume_on_other_pairs_needs_new_data_and_starts_the_next_epoch(tmp_path, capsys):
    corpus, first = _first_run(tmp_path)
    grown = _grown(tmp_path, corpus)
    with pytest.raises(ValueError, match="--new-data"):
        Trainer.from_run(tiny_run(max_steps=6), grown, tmp_path / "run", progress=False)
    resumed = Trainer.from_run(tiny_run(max_steps=6), grown, tmp_path / "run", progress=False, new_data=True)
    assert (resumed.step, resumed.epoch, resumed.batch_in_epoch) == (3, 1, 0)
    assert "epoch 1 starts on it" in capsys.readouterr().err
    assert resumed.source.pairs > first.source.pairs
    resumed.train()
    assert (resumed.step, resumed.epoch, resumed.batch_in_epoch) == (6, 1, 3)
    assert load_training_state(tmp_path / "run" / "checkpoints" / "last.pt")["train_data"] == resumed.source.identity


def test_new_data_on_the_same_pairs_resumes_where_the_run_stopped(tmp_path, capsys):
    corpus, _ = _first_run(tmp_path)  # stopped mid-epoch at step 3
    again = Trainer.from_run(tiny_run(max_steps=6), corpus, tmp_path / "run", progress=False, new_data=True)
    assert (again.step, again.epoch, again.batch_in_epoch) == (3, 0, 3)  # the command kept --new-data: no new epoch
    assert "starts on it" not in capsys.readouterr().err


def test_a_checkpoint_of_the_old_in_memory_identity_resumes_on_in_memory_data(tmp_path):
    corpus, _ = _first_run(tmp_path)
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    state = load_training_state(last)
    state["train_data"] = IN_MEMORY  # what checkpoints recorded before in-memory data was named by its pairs
    save_training_state(last, state)
    resumed = Trainer.from_run(tiny_run(max_steps=5), corpus, tmp_path / "run", progress=False)
    assert (resumed.step, resumed.epoch, resumed.batch_in_epoch) == (3, 0, 3)
