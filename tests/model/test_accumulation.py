"""Gradient accumulation: N batches per update give the update one batch of all their tokens would give."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
from model_toys import tiny_run

from model.data import Batch
from model.train import Trainer, build_optimizer, load_data, prepare_tokenizer, seed_process
from model.transformer import Transformer


@pytest.fixture(scope="module")
def tokenizer(corpus_dir, tmp_path_factory):
    return prepare_tokenizer(tiny_run(), corpus_dir, tmp_path_factory.mktemp("tokenizer"))


def _trainer(run, tokenizer, corpus_dir, out_dir) -> Trainer:
    seed_process(run.train)  # the same initial weights for every trainer of a test
    model = Transformer(run.model)
    optimizer, scheduler = build_optimizer(run, model)
    data = load_data(run, corpus_dir, tokenizer)
    return Trainer(run, tokenizer, data, model, optimizer, scheduler, out_dir, progress=False)


def _gradients_of_one_update(trainer: Trainer, batches) -> tuple[float, dict[str, torch.Tensor]]:
    grads: dict[str, torch.Tensor] = {}

    def snapshot(optimizer, args, kwargs):
        grads.update({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})

    handle = trainer.optimizer.register_step_pre_hook(snapshot)
    loss = trainer.train_step(batches)
    handle.remove()
    return loss, grads


def test_accumulation_of_two_batches_equals_one_batch_of_their_tokens(tokenizer, corpus_dir, tmp_path):
    run = tiny_run(clip_norm=1e9)  # the raw gradients are compared: no clipping
    run.model.dropout = 0.0  # the same computation for a pair in either batch
    a = _trainer(run, tokenizer, corpus_dir, tmp_path / "a")
    b = _trainer(run, tokenizer, corpus_dir, tmp_path / "b")
    examples = sorted(a.train_examples, key=lambda e: len(e.tgt))
    short, long = examples[:10], examples[-6:]  # different token counts: a mean of the two means would differ
    first, second = Batch.from_examples(short), Batch.from_examples(long)
    assert first.n_tokens != second.n_tokens

    loss_accumulated, accumulated = _gradients_of_one_update(a, [first, second])
    loss_joint, joint = _gradients_of_one_update(b, Batch.from_examples(short + long))
    assert loss_accumulated == pytest.approx(loss_joint, rel=1e-5)
    assert accumulated.keys() == joint.keys() and accumulated
    for name in joint:
        torch.testing.assert_close(accumulated[name], joint[name], rtol=1e-4, atol=1e-7, msg=name)

    # the weights move alike too (Adam's first step is about lr x sign(g): compared loosely)
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=0, atol=2 * a.scheduler.get_last_lr()[0])

    # one batch alone is another gradient: the test can tell
    c = _trainer(run, tokenizer, corpus_dir, tmp_path / "c")
    _, alone = _gradients_of_one_update(c, first)
    assert any(not torch.allclose(alone[n], joint[n], rtol=1e-3, atol=1e-6) for n in joint)


def test_accumulation_counts_updates_and_resumes_between_them(tokenizer, corpus_dir, tmp_path):
    run = tiny_run(accumulate=3, max_steps=2)
    first = _trainer(run, tokenizer, corpus_dir, tmp_path / "a")
    per_epoch = len(first.epoch_batches(0))
    assert first.total_steps() == 2
    first.cfg.max_steps = 0
    assert first.total_steps() == math.ceil(per_epoch / 3) * run.train.epochs
    batches_per_update = [len(keys) for _, keys in first.updates(0)]
    assert batches_per_update[:-1] == [3] * (len(batches_per_update) - 1) and sum(batches_per_update) == per_epoch

    first.cfg.max_steps = 2
    (tmp_path / "a").mkdir()
    shutil.copy(tokenizer.path, tmp_path / "a" / "tokenizer.model")  # what from_run would have put there
    first.train()
    assert (first.step, first.epoch, first.batch_in_epoch) == (2, 0, 6)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    first.cfg.max_steps = 3
    first.train()

    resumed = Trainer.from_run(tiny_run(accumulate=3, max_steps=3), corpus_dir, tmp_path / "b", progress=False)
    assert (resumed.step, resumed.batch_in_epoch) == (2, 6)
    resumed.train()
    assert (resumed.step, resumed.batch_in_epoch) == (3, 9)
    for pa, pb in zip(first.model.state_dict().values(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)


def test_an_accumulate_below_one_is_refused(tmp_path):
    import json

    from model.config import RunConfig

    (tmp_path / "run.json").write_text(json.dumps({"train": {"accumulate": 0}}))
    with pytest.raises(ValueError, match="accumulate"):
        RunConfig.load(tmp_path / "run.json")
