"""Position-based sparse attention: a fixed pattern of which keys each query may see, as a mask over the scores.

The survey's position-based sparse patterns (Child et al. 2019, Beltagy et al. 2020), combined:
- local window: query i sees key j when |i - j| <= window;
- strided: and when |i - j| is a multiple of the stride (every stride-th earlier or later position);
- global: the first ``n_global`` positions see every position and every position sees them.
Softmax then runs over the allowed keys only: masked scores get probability exactly 0
(``scaled_dot_product_attention``), so the attention a viewer shows is zero outside the pattern. The pattern is
applied to encoder and decoder self-attention (in the decoder together with the causal mask); cross-attention stays
full. Written as a dense mask: it shows the pattern, not the memory saving a block-sparse kernel would bring.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SparsePattern:
    window: int
    stride: int = 0  # 0: no strided keys
    n_global: int = 0  # 0: no global positions

    def allowed(self, queries: Tensor, keys: Tensor) -> Tensor:
        """(len(queries), len(keys)) bool over absolute positions: True where query i may attend to key j."""
        i, j = queries[:, None], keys[None, :]
        distance = (i - j).abs()
        allowed = distance <= self.window  # local window
        if self.stride > 0:
            allowed = allowed | (distance % self.stride == 0)  # strided
        if self.n_global > 0:
            allowed = allowed | (i < self.n_global) | (j < self.n_global)  # global rows and columns
        return allowed

    def mask(self, n_queries: int, n_past: int | Tensor = 0) -> Tensor:
        """(tgt, past + tgt) for queries at positions past .. past + tgt - 1 over keys 0 .. past + tgt - 1."""
        keys = torch.arange(n_queries + n_past)
        return self.allowed(torch.arange(n_queries) + n_past, keys)
