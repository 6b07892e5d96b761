"""Positional encodings: sinusoidal (Vaswani et al. 2017), learned absolute, relative (Shaw et al. 2018)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """PE(i, 2j) = sin(i / 10000^(2j/d)), PE(i, 2j+1) = cos(i / 10000^(2j/d)); shape (n_positions, d_model)."""
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (n, 1)
    two_j = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,)
    angle = position / torch.pow(10000.0, two_j / d_model)  # (n, d/2)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


class SinusoidalPositions(nn.Module):
    def __init__(self, n_positions: int, d_model: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_table(n_positions, d_model), persistent=False)

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


def embedding_scale(d_model: int) -> float:
    return math.sqrt(d_model)
