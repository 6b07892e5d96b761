"""Dropout (Srivastava et al. 2014) as nn.Dropout computes it: in training, each value is zeroed with probability p and
the rest scaled by 1 / (1 - p); in evaluation (and in every exported graph) the identity.

The mask is drawn as ``uniform [0, 1) >= p``, the same Bernoulli(1 - p) keep as nn.Dropout's ``bernoulli_``, which
on a CPU is about twice as slow to draw: dropout masks were 17% of a training step of the d384 model on 2 cores,
and this makes the whole step about 7% faster (docs/models-round3.md, "Training speed").
"""

from __future__ import annotations

from torch import Tensor, nn, rand


class Dropout(nn.Module):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability has to be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = rand(x.shape, device=x.device) >= self.p
        return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"
