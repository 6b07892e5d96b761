"""The Noam learning-rate schedule: lr = factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5)."""

from __future__ import annotations


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
