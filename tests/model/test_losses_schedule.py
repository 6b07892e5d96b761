"""Label-smoothed cross-entropy by hand, its analytic gradient against autograd's (in blocks of rows, every dtype
training uses), and the Noam learning rate at known steps."""

from __future__ import annotations

import math

import pytest
import torch

import model.losses
from model.losses import label_smoothed_nll
from model.schedule import noam_lr


def _log_softmax(row: list[float]) -> list[float]:
    log_z = math.log(sum(math.exp(x) for x in row))
    return [x - log_z for x in row]


def test_label_smoothed_loss_equals_a_hand_computed_value():
    logits = [[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 3.0, -2.0], [9.0, -9.0, 1.0, 1.0]]
    targets = [1, 2, 0]  # pad id 0: the third row is ignored
    eps, k = 0.1, 4
    loss, nll = label_smoothed_nll(torch.tensor(logits), torch.tensor(targets), eps, ignore_index=0)

    expected_loss = expected_nll = 0.0
    for row, target in list(zip(logits, targets, strict=True))[:2]:
        lp = _log_softmax(row)
        q = [1 - eps if c == target else eps / (k - 1) for c in range(k)]
        expected_loss += -sum(qc * lpc for qc, lpc in zip(q, lp, strict=True))
        expected_nll += -lp[target]
    assert loss.item() == pytest.approx(expected_loss, rel=1e-6)
    assert nll.item() == pytest.approx(expected_nll, rel=1e-6)


def test_pad_targets_are_ignored_whatever_their_logits():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    target = torch.tensor([[3, 4, 5, 0, 0], [6, 1, 0, 0, 0]])
    loss, nll = label_smoothed_nll(logits, target, 0.1, ignore_index=0)
    noisy = logits.clone()
    noisy[target == 0] = torch.randn(int((target == 0).sum()), 7, generator=g) * 100
    loss2, nll2 = label_smoothed_nll(noisy, target, 0.1, ignore_index=0)
    assert loss2.item() == pytest.approx(loss.item(), rel=1e-6)
    assert nll2.item() == pytest.approx(nll.item(), rel=1e-6)
    keep = target != 0
    plain = torch.nn.functional.cross_entropy(logits[keep], target[keep], reduction="sum")
    assert nll.item() == pytest.approx(plain.item(), rel=1e-5)


def test_no_smoothing_is_plain_cross_entropy_and_smoothing_costs_on_a_confident_prediction():
    logits = torch.tensor([[10.0, -5.0, -5.0], [-5.0, 10.0, -5.0]])
    target = torch.tensor([0, 1])
    loss, nll = label_smoothed_nll(logits, target, 0.0, ignore_index=-100)
    assert loss.item() == pytest.approx(nll.item())
    smoothed, _ = label_smoothed_nll(logits, target, 0.2, ignore_index=-100)
    assert smoothed.item() > loss.item() + 1.0


def _reference(logits, target, eps, ignore_index):
    """The textbook chain, differentiated by autograd (what model/losses.py computed before its own gradient)."""
    log_probs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    k = log_probs.size(-1)
    keep = target != ignore_index
    true_lp = log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    loss = -(1 - eps) * true_lp - eps / (k - 1) * (log_probs.sum(-1) - true_lp)
    return torch.where(keep, loss, 0.0).sum(), torch.where(keep, -true_lp, 0.0).sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("block_bytes", [4 * 7 * 3, model.losses.BLOCK_BYTES])  # 3 rows a block, or all in one
def test_the_analytic_gradient_is_autograds(dtype, block_bytes, monkeypatch):
    monkeypatch.setattr(model.losses, "BLOCK_BYTES", block_bytes)
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(3, 5, 7, generator=g) * 4).to(dtype)
    target = torch.randint(1, 7, (3, 5), generator=g)
    target[0, 3:] = 0
    target[2, 1:] = 0
    results = []
    for f in (label_smoothed_nll, _reference):
        x = logits.clone().requires_grad_()
        loss, nll = f(x, target, 0.1, 0)
        (0.7 * loss + 0.3 * nll).backward()
        assert x.grad.dtype == dtype and loss.dtype == torch.promote_types(dtype, torch.float32)
        results.append((loss.detach(), nll.detach(), x.grad.float()))
    (loss, nll, grad), (ref_loss, ref_nll, ref_grad) = results
    tolerance = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-6}
    torch.testing.assert_close(loss, ref_loss, **tolerance)
    torch.testing.assert_close(nll, ref_nll, **tolerance)
    torch.testing.assert_close(grad, ref_grad, **tolerance)
    assert grad[target == 0].abs().max() == 0  # ignored tokens get no gradient


def test_gradcheck_in_float64_through_both_outputs(monkeypatch):
    monkeypatch.setattr(model.losses, "BLOCK_BYTES", 4 * 9 * 2)  # 2 rows a block
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 4, 9, dtype=torch.float64, generator=g).requires_grad_()
    target = torch.tensor([[1, 8, 3, 0], [2, 0, 0, 0]])
    assert torch.autograd.gradcheck(lambda x: label_smoothed_nll(x, target, 0.2, 0), (logits,))


def test_noam_lr_at_known_steps():
    d, warmup = 512, 4000
    assert noam_lr(1, d, warmup) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam_lr(100, d, warmup) == pytest.approx(512**-0.5 * 100 * 4000**-1.5)
    assert noam_lr(4000, d, warmup) == pytest.approx(512**-0.5 * 4000**-0.5)  # ~ 6.99e-4
    assert noam_lr(4000, d, warmup) == pytest.approx(6.9877e-4, rel=1e-4)
    assert noam_lr(16000, d, warmup) == pytest.approx(512**-0.5 * 16000**-0.5)
    assert noam_lr(16000, d, warmup) == pytest.approx(noam_lr(4000, d, warmup) / 2)
    assert noam_lr(4000, d, warmup, factor=2.0) == pytest.approx(2 * noam_lr(4000, d, warmup))
    assert noam_lr(0, d, warmup) == noam_lr(1, d, warmup)  # step 0 is treated as step 1


def test_noam_lr_peaks_at_warmup():
    d, warmup = 256, 50
    rates = [noam_lr(step, d, warmup) for step in range(1, 200)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == warmup
    assert all(a < b for a, b in zip(rates[: warmup - 1], rates[1:warmup], strict=True))  # rising
    assert all(a > b for a, b in zip(rates[warmup - 1 : -1], rates[warmup:], strict=True))  # falling
