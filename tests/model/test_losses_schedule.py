"""Label-smoothed cross-entropy by hand, and the Noam learning rate at known steps."""

from __future__ import annotations

import math

import pytest
import torch

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
