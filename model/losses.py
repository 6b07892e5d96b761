"""Label-smoothed cross-entropy (Szegedy et al. 2016, as used by Vaswani et al. 2017)."""

from __future__ import annotations

import torch
from torch import Tensor


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, ignore_index: int) -> tuple[Tensor, Tensor]:
    """Sum over non-ignored tokens of the cross-entropy against a smoothed target distribution.

    The true class gets probability 1 - eps and every other class eps / (K - 1).
    logits: (..., K); target: (...). Returns (smoothed loss sum, plain NLL sum).
    """
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    k = log_probs.size(-1)
    keep = target != ignore_index
    safe_target = target.masked_fill(~keep, 0)
    true_lp = log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)
    other_lp = log_probs.sum(-1) - true_lp
    loss = -(1.0 - epsilon) * true_lp - (epsilon / (k - 1)) * other_lp
    zero = torch.zeros((), dtype=loss.dtype)
    return torch.where(keep, loss, zero).sum(), torch.where(keep, -true_lp, zero).sum()
