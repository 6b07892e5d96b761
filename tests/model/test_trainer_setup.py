"""Trainer set-up: a constructor that only stores parts, and the named steps Trainer.from_run runs."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
from model_toys import CORPUS_VOCAB, tiny_run

import model.train as train_module
from model.checkpoint import TOKENIZER_FILE, load_training_state, save_training_state
from model.schedule import noam_lr
from model.tokenizer import Tokenizer
from model.train import (
    Trainer,
    build_optimizer,
    init_distributed,
    load_data,
    prepare_tokenizer,
    seed_process,
)
from model.transformer import Transformer


@pytest.fixture(scope="module")
def tokenizer(corpus_dir, tmp_path_factory) -> Tokenizer:
    return prepare_tokenizer(tiny_run(), corpus_dir, tmp_path_factory.mktemp("tokenizer"))


def _from_parts(run, tokenizer, corpus_dir, out_dir) -> Trainer:
    model = Transformer(run.model)
    optimizer, scheduler = build_optimizer(run, model)
    data = load_data(run, corpus_dir, tokenizer)
    return Trainer(run, tokenizer, data, model, optimizer, scheduler, out_dir, progress=False)


def test_the_constructor_reads_and_writes_nothing(tokenizer, corpus_dir, tmp_path, monkeypatch):
    run = tiny_run()
    model = Transformer(run.model)
    optimizer, scheduler = build_optimizer(run, model)
    data = load_data(run, corpus_dir, tokenizer)

    def forbidden(*args, **kwargs):
        raise AssertionError("Trainer.__init__ did set-up work")

    for name in ("train_tokenizer", "read_parallel", "encode_pairs", "load_training_state", "seed_everything"):
        monkeypatch.setattr(train_module, name, forbidden)
    monkeypatch.setattr(dist, "init_process_group", forbidden)
    monkeypatch.setattr(torch, "set_num_threads", forbidden)

    out = tmp_path / "run"
    trainer = Trainer(run, tokenizer, data, model, optimizer, scheduler, out, progress=False)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert (trainer.rank, trainer.world, trainer.ddp) == (0, 1, None)
    assert trainer.model is model and trainer.optimizer is optimizer and trainer.tokenizer is tokenizer
    assert trainer.train_examples is data.train_examples and trainer.valid_src == data.valid_src
    assert (trainer.step, trainer.epoch, trainer.batch_in_epoch, trainer.history) == (0, 0, 0, [])
    assert trainer.train_seconds == 0.0


def test_the_constructor_does_not_resume_a_run_folder_that_has_last_pt(tokenizer, corpus_dir, tmp_path):
    run = tiny_run(max_steps=2)
    first = _from_parts(run, tokenizer, corpus_dir, tmp_path)
    assert first.resume_if_present() is False  # nothing there yet
    first.train()
    assert (tmp_path / "checkpoints" / "last.pt").is_file()

    second = _from_parts(tiny_run(max_steps=2), tokenizer, corpus_dir, tmp_path)
    assert second.step == 0  # the constructor left last.pt alone
    assert second.resume_if_present() is True
    assert (second.step, second.epoch, second.batch_in_epoch) == (2, 0, 2)
    assert [r["step"] for r in second.history] == [2]
    for a, b in zip(first.model.state_dict().values(), second.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_init_distributed_without_torchrun_is_a_single_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert init_distributed() == (0, 1)
    assert not dist.is_initialized()


def test_seed_process_makes_the_initial_weights_follow_the_seed():
    run = tiny_run()
    seed_process(run.train)
    a = Transformer(run.model).state_dict()
    seed_process(run.train)
    b = Transformer(run.model).state_dict()
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_prepare_tokenizer_trains_once_then_reuses_the_file(corpus_dir, tmp_path, monkeypatch):
    run = tiny_run()
    out = tmp_path / "run"
    tokenizer = prepare_tokenizer(run, corpus_dir, out)
    assert (out / TOKENIZER_FILE).is_file() and tokenizer.vocab_size == CORPUS_VOCAB
    trained = (out / TOKENIZER_FILE).read_bytes()

    monkeypatch.setattr(train_module, "train_tokenizer", lambda *a, **k: pytest.fail("trained again"))
    again = prepare_tokenizer(run, corpus_dir, out)
    assert (out / TOKENIZER_FILE).read_bytes() == trained and again.vocab_size == CORPUS_VOCAB

    run.model.vocab_size += 1
    with pytest.raises(ValueError, match="vocab_size"):
        prepare_tokenizer(run, corpus_dir, out)


def test_load_data_encodes_both_splits_and_drops_long_training_pairs(tokenizer, corpus_dir):
    data = load_data(tiny_run(), corpus_dir, tokenizer)
    assert len(data.train_examples) == 240  # every toy pair fits max_length=40
    assert len(data.valid_src) == len(data.valid_tgt) == len(data.valid_examples) == 12
    assert data.valid_src[0] == (corpus_dir / "val.de").read_text().splitlines()[0]

    short = load_data(tiny_run(max_length=6), corpus_dir, tokenizer)
    assert 0 < len(short.train_examples) < 240
    assert len(short.valid_examples) == 12  # validation is filtered only by the position table

    run = tiny_run()  # pairs longer than the position table would crash the validation loss
    run.model.max_positions = sorted(max(len(e.src), len(e.tgt) - 1) for e in data.valid_examples)[6]
    tight = load_data(run, corpus_dir, tokenizer)
    assert 0 < len(tight.valid_examples) < 12 and len(tight.valid_src) == 12
    assert max(max(len(e.src), len(e.tgt) - 1) for e in tight.valid_examples) <= run.model.max_positions


def test_build_optimizer_starts_on_the_noam_schedule():
    run = tiny_run()
    model = Transformer(run.model)
    optimizer, scheduler = build_optimizer(run, model)
    expected = noam_lr(1, run.model.d_model, run.train.warmup_steps, run.train.lr_factor)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(expected)
    assert scheduler.get_last_lr()[0] == pytest.approx(expected)
    assert optimizer.param_groups[0]["betas"] == tuple(run.train.adam_betas)


def test_train_seconds_is_measured_with_one_validation_and_summed_across_resumes(corpus_dir, tmp_path):
    out = tmp_path / "run"
    first = Trainer.from_run(tiny_run(max_steps=2), corpus_dir, out, progress=False)
    first.train()
    assert len(first.history) == 1 and first.train_seconds > 0
    saved = load_training_state(out / "checkpoints" / "last.pt")["train_seconds"]
    assert 0 < saved <= first.train_seconds

    summary = first.finalize()
    assert summary["train_seconds"] == round(first.train_seconds, 1)
    release = json.loads((out / "release" / "config.json").read_text())
    assert isinstance(release["training"]["train_seconds"], float)

    resumed = Trainer.from_run(tiny_run(max_steps=4), corpus_dir, out, progress=False)
    assert resumed.train_seconds == saved
    resumed.train()
    assert resumed.step == 4 and resumed.train_seconds > saved


def test_a_checkpoint_without_train_seconds_still_resumes(corpus_dir, tmp_path):
    out = tmp_path / "run"
    first = Trainer.from_run(tiny_run(max_steps=2), corpus_dir, out, progress=False)
    first.train()
    last = out / "checkpoints" / "last.pt"
    state = load_training_state(last)
    del state["train_seconds"]  # as written before the key existed
    save_training_state(last, state)

    resumed = Trainer.from_run(tiny_run(max_steps=3), corpus_dir, out, progress=False)
    assert resumed.step == 2 and resumed.train_seconds == 0.0  # one validation: no span to go by
    resumed.train()
    assert resumed.step == 3 and resumed.train_seconds > 0


def test_bleu_sample_spreads_over_the_validation_split(corpus_dir, tmp_path):
    trainer = Trainer.from_run(tiny_run(bleu_max_sentences=4), corpus_dir, tmp_path / "run", progress=False)
    sources, references = trainer.bleu_sample()
    assert sources == [trainer.valid_src[i] for i in (0, 3, 6, 9)]  # 12 sentences: every third
    assert references == [trainer.valid_tgt[i] for i in (0, 3, 6, 9)]
    trainer.cfg.bleu_max_sentences = 0
    assert trainer.bleu_sample() == (trainer.valid_src, trainer.valid_tgt)
