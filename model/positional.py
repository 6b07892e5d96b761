"""Positional encodings: sinusoidal (Vaswani et al. 2017), learned absolute, relative (Shaw et al. 2018), and
Transformer-XL's relative sinusoids with the u, v biases (Dai et al. 2019)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(n_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """PE(i, 2j) = sin(i / 10000^(2j/d)), PE(i, 2j+1) = cos(i / 10000^(2j/d)); shape (n_positions, d_model).

    ``layout`` "halves" holds the same values with the sines in the first d/2 columns and the cosines in the last
    (column j: sin of frequency j, column d/2 + j: its cos), as Marian and fairseq lay them out.
    """
    table = sinusoids(torch.arange(n_positions), d_model)
    if layout == "halves":
        return torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)
    return table


def sinusoids(positions: Tensor, d_model: int) -> Tensor:
    """The sinusoidal table at any (also negative) positions: (len(positions), d_model), float32."""
    position = positions.to(torch.float64).unsqueeze(1)  # (n, 1)
    two_j = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,)
    angle = position / torch.pow(10000.0, two_j / d_model)  # (n, d/2)
    table = torch.zeros(len(positions), d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


class SinusoidalPositions(nn.Module):
    def __init__(self, n_positions: int, d_model: int, layout: str = "interleaved") -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_table(n_positions, d_model, layout), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        return self.table[positions]  # (len, d_model)


class LearnedPositions(nn.Module):
    def __init__(self, n_positions: int, d_model: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(n_positions, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)

    def forward(self, positions: Tensor) -> Tensor:
        return self.embedding(positions)


class RelativePositions(nn.Module):
    """Shaw et al. 2018: learned vectors a^K, a^V for clipped relative distances j - i in [-k, k]."""

    def __init__(self, max_distance: int, d_head: int) -> None:
        super().__init__()
        self.max_distance = max_distance
        self.keys = nn.Embedding(2 * max_distance + 1, d_head)
        self.values = nn.Embedding(2 * max_distance + 1, d_head)
        for table in (self.keys, self.values):
            nn.init.normal_(table.weight, std=d_head**-0.5)

    def distances(self, n_queries: int, n_keys: int) -> Tensor:
        """Clipped j - i for queries at the last n_queries positions of n_keys: (n_queries, n_keys)."""
        keys = torch.arange(n_keys)
        queries = keys[n_keys - n_queries :]
        return (keys.unsqueeze(0) - queries.unsqueeze(1)).clamp(-self.max_distance, self.max_distance)

    def forward(self, n_queries: int, n_keys: int) -> tuple[Tensor, Tensor]:
        index = self.distances(n_queries, n_keys) + self.max_distance
        return self.keys(index), self.values(index)  # each (n_queries, n_keys, d_head)


class XLRelativePositions(nn.Module):
    """Transformer-XL (Dai et al. 2019, eq. 3): the score of query i and key j, written out term by term,

        A_ij = q_i^T k_j  (a)  +  q_i^T W_R R_{i-j}  (b)  +  u^T k_j  (c)  +  v^T W_R R_{i-j}  (d),

    with R_{i-j} the sinusoid of the relative distance i - j (a fixed table, not learned), W_R a learned projection
    and u, v learned per head (here per layer, as ``untie_r`` in the reference code). ``forward`` returns
    (b) + (c) + (d) = u^T k_j + (q_i + v)^T W_R R_{i-j}; the content term (a) is the usual q k^T. No absolute
    position is added to the embeddings. In the encoder i - j runs both ways (the sinusoids of negative distances).

    No segment recurrence: Transformer-XL reads a long text in fixed-length segments and attends to the cached
    hidden states of the previous segment. A translation is one sentence of at most ``max_positions`` tokens, read
    whole by the encoder; within the decoder the key/value cache already holds every earlier token. There is no
    previous segment to carry over, so only the relative encoding (what lets the recurrence work) is kept.
    """

    def __init__(self, max_positions: int, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.max_positions, self.n_heads, self.d_head = max_positions, n_heads, d_model // n_heads
        distances = torch.arange(-(max_positions - 1), max_positions)  # every i - j of two positions
        self.register_buffer("table", sinusoids(distances, d_model), persistent=False)  # (2L - 1, d_model)
        self.w_r = nn.Linear(d_model, d_model, bias=False)
        nn.init.xavier_uniform_(self.w_r.weight)
        self.u = nn.Parameter(torch.zeros(n_heads, self.d_head))
        self.v = nn.Parameter(torch.zeros(n_heads, self.d_head))

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        """q: (batch, heads, tgt, d_head) at the last tgt of the src key positions; k: (batch, heads, src, d_head).

        Returns (b) + (c) + (d): (batch, heads, tgt, src). W_R R is computed once per distance that occurs
        (tgt + src - 1 of them), then each (i, j) picks its distance's column.
        """
        n_q, n_k = q.size(2), k.size(2)
        distances = torch.arange(1 - n_q, n_k)  # i - j from the last key and first query to the first key
        r = self.table[distances + self.max_positions - 1]  # (tgt + src - 1, d_model): R_{i-j}
        w_r = self.w_r(r).view(-1, self.n_heads, self.d_head).transpose(0, 1)  # (heads, tgt + src - 1, d_head)
        bd = (q + self.v[:, None]) @ w_r.transpose(-2, -1)  # (batch, heads, tgt, tgt + src - 1): (b) + (d)
        queries = torch.arange(n_q) + (n_k - n_q)  # absolute query positions
        column = queries[:, None] - torch.arange(n_k)[None, :] - (1 - n_q)  # index of i - j in ``distances``
        bd = torch.gather(bd, -1, column.expand(*bd.shape[:2], n_q, n_k))  # (batch, heads, tgt, src)
        c = self.u[None, :, None, :] @ k.transpose(-2, -1)  # (batch, heads, 1, src): (c)
        return bd + c


def embedding_scale(d_model: int) -> float:
    return math.sqrt(d_model)
