"""The output projection computed inside the label-smoothed loss (model/losses.py's projected_label_smoothed_nll):
the loss and the gradients of nn.Linear followed by label_smoothed_nll, for every dtype training uses, with or
without a bias, in blocks of rows or in one; its buffer is reused rather than allocated anew; and the trainer's
step is the same either way."""

from __future__ import annotations

import pytest
import torch
from model_toys import tiny_run

import model.losses
from model.data import Batch
from model.losses import label_smoothed_nll, projected_label_smoothed_nll
from model.train import Trainer


def _inputs(dtype: torch.dtype, bias: bool, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    master = torch.float64 if dtype == torch.float64 else torch.float32  # autocast: float32 weights, dtype products
    hidden = torch.randn(3, 5, 6, generator=g, dtype=master)
    weight = torch.randn(11, 6, generator=g, dtype=master)
    b = torch.randn(11, generator=g, dtype=master) if bias else None
    target = torch.randint(1, 11, (3, 5), generator=g)
    target[0, 3:] = 0
    target[2, 1:] = 0
    return hidden, weight, b, target


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("block_bytes", [4 * 11 * 2, model.losses.BLOCK_BYTES])
def test_the_projected_loss_is_linear_then_label_smoothed_nll(dtype, bias, block_bytes, monkeypatch):
    monkeypatch.setattr(model.losses, "BLOCK_BYTES", block_bytes)
    results = []
    for projected in (True, False):
        hidden, weight, b, target = (x if x is None or x.dtype == torch.int64 else x.requires_grad_() for x in
                                     _inputs(dtype, bias))  # fmt: skip
        if projected:
            loss, nll = projected_label_smoothed_nll(hidden, weight, b, target, 0.1, 0, dtype)
        else:
            logits = torch.nn.functional.linear(hidden.to(dtype), weight.to(dtype), None if b is None else b.to(dtype))
            loss, nll = label_smoothed_nll(logits, target, 0.1, 0)
        (0.37 * loss).backward()
        grads = [x.grad for x in (hidden, weight, b) if x is not None]
        assert all(g.dtype == hidden.dtype for g in grads)  # gradients in the parameters' own dtype
        results.append((loss.detach(), nll.detach(), grads))
    (loss, nll, grads), (ref_loss, ref_nll, ref_grads) = results
    tolerance = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-6}
    torch.testing.assert_close(loss, ref_loss, **tolerance)
    torch.testing.assert_close(nll, ref_nll, **tolerance)
    for grad, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref, **tolerance)
    hidden, _, _, target = _inputs(dtype, bias)
    assert grads[0][target == 0].abs().max() == 0  # padding rows get no gradient


def test_gradcheck_in_float64(monkeypatch):
    monkeypatch.setattr(model.losses, "BLOCK_BYTES", 4 * 11 * 2)
    hidden, weight, b, target = (x if x.dtype == torch.int64 else x.requires_grad_() for x in
                                 _inputs(torch.float64, True))  # fmt: skip
    assert torch.autograd.gradcheck(
        lambda h, w, c: projected_label_smoothed_nll(h, w, c, target, 0.2, 0)[0], (hidden, weight, b)
    )


def test_without_gradients_it_returns_the_loss_and_refuses_a_backward():
    hidden, weight, b, target = _inputs(torch.float32, False)
    with torch.no_grad():
        loss, nll = projected_label_smoothed_nll(hidden, weight.requires_grad_(), b, target, 0.0, 0)
    keep = target != 0
    plain = torch.nn.functional.cross_entropy(hidden[keep] @ weight.detach().t(), target[keep], reduction="sum")
    torch.testing.assert_close(nll, plain)
    torch.testing.assert_close(loss, nll)  # epsilon 0: the smoothed loss is the NLL
    assert not loss.requires_grad
    _, nll = projected_label_smoothed_nll(hidden.requires_grad_(), weight, b, target, 0.1, 0)
    assert not nll.requires_grad  # only the smoothed loss is differentiable


def test_the_logits_buffer_is_reused_not_allocated_per_call(monkeypatch):
    monkeypatch.setattr(model.losses._workspaces, "buffers", {}, raising=False)  # none left by other tests
    hidden, weight, b, target = _inputs(torch.float32, False)
    projected_label_smoothed_nll(hidden, weight, b, target, 0.1, 0)
    first = model.losses._workspaces.buffers[(torch.float32, torch.device("cpu"))]
    target[1, 2:] = 0  # fewer rows: the same buffer
    projected_label_smoothed_nll(hidden, weight, b, target, 0.1, 0)
    assert model.losses._workspaces.buffers[(torch.float32, torch.device("cpu"))] is first
    bigger = torch.randn(4, 5, 6)
    projected_label_smoothed_nll(bigger, weight, b, torch.randint(1, 11, (4, 5)), 0.1, 0)  # more rows: it grows
    grown = model.losses._workspaces.buffers[(torch.float32, torch.device("cpu"))]
    assert grown.numel() == 20 * 11 and grown is not first


@pytest.mark.parametrize("autocast", ["", "bf16"])
def test_a_training_step_is_the_same_with_the_projection_inside_the_loss(corpus_dir, tmp_path, autocast):
    trainers = []
    for projected in (True, False):
        torch.manual_seed(0)
        trainer = Trainer.from_run(tiny_run(autocast=autocast), corpus_dir, tmp_path / f"r{projected}", progress=False)
        trainer.projected_loss = projected
        batch = Batch.from_examples(trainer.train_examples[:8])
        valid = trainer.validation_loss(trainer.valid_examples[:8])
        torch.manual_seed(1)  # the same dropout masks
        loss = trainer.train_step(batch)
        grads = {name: p.grad for name, p in trainer.model.named_parameters()}  # clipped, before Adam's step
        trainers.append((loss, valid, grads))
    (loss, valid, grads), (ref_loss, ref_valid, ref_grads) = trainers
    tolerance = {"rtol": 2e-2, "atol": 1e-3} if autocast else {"rtol": 1e-5, "atol": 1e-6}
    assert loss == pytest.approx(ref_loss, rel=tolerance["rtol"])
    assert valid == pytest.approx(ref_valid, rel=1e-5)  # validation: float32 either way
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], **tolerance, msg=name)
