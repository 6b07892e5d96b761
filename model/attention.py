"""Scaled dot-product attention and multi-head attention with an incremental key/value cache."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from model.dropout import Dropout
from model.positional import RelativePositions, XLRelativePositions

KVPair = tuple[Tensor, Tensor]


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    rel_k: Tensor | None = None,
    rel_v: Tensor | None = None,
    dropout: nn.Module | None = None,
    position_scores: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, returning the output and the attention probabilities.

    q: (batch, heads, tgt, d_k); k, v: (batch, heads, src, d_k);
    mask: bool, True where attending is allowed, broadcastable to (batch, heads, tgt, src);
    rel_k, rel_v: (tgt, src, d_k) relative position representations (Shaw et al. 2018);
    position_scores: (batch, heads, tgt, src) position terms added to Q K^T (Transformer-XL's (b) + (c) + (d)).
    Masked positions get probability exactly 0.
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1)  # (batch, heads, tgt, src)
    if rel_k is not None:
        scores = scores + torch.einsum("bhqd,qkd->bhqk", q, rel_k)
    if position_scores is not None:
        scores = scores + position_scores
    scores = scores / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1)
    if mask is not None:
        probs = probs.masked_fill(~mask, 0.0)  # exact zeros even when a whole row is masked
    weights = dropout(probs) if dropout is not None else probs
    out = weights @ v  # (batch, heads, tgt, d_k)
    if rel_v is not None:
        out = out + torch.einsum("bhqk,qkd->bhqd", weights, rel_v)
    return out, probs


class MultiHeadAttention(nn.Module):
    """Multi-head attention: h parallel scaled dot-product attentions over projected subspaces."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        attention_dropout: float = 0.0,
        relative: RelativePositions | None = None,
        xl_positions: XLRelativePositions | None = None,
    ) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = Dropout(attention_dropout) if attention_dropout > 0 else None
        self.relative = relative
        self.xl_positions = xl_positions

    def _split(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_head).transpose(1, 2)  # (batch, heads, len, d_head)

    def project_kv(self, x: Tensor) -> KVPair:
        """Keys and values of x, split into heads: each (batch, heads, len, d_head)."""
        return self._split(self.k_proj(x)), self._split(self.v_proj(x))

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        kv: KVPair | None = None,
        past: KVPair | None = None,
    ) -> tuple[Tensor, Tensor, KVPair | None]:
        """x: queries (batch, tgt, d_model).

        Self-attention when ``kv`` is None: keys/values come from x, appended to ``past`` (the cache of
        earlier steps) and returned as ``present``. Cross-attention when ``kv`` holds precomputed
        keys/values of the encoder output (computed once per source).
        """
        q = self._split(self.q_proj(x))
        present = None
        if kv is None:
            k, v = self.project_kv(x)
            if past is not None:
                k = torch.cat([past[0], k], dim=2)
                v = torch.cat([past[1], v], dim=2)
            present = (k, v)
        else:
            k, v = kv
        rel_k = rel_v = None
        if self.relative is not None:
            rel_k, rel_v = self.relative(q.size(2), k.size(2))
        position_scores = self.xl_positions(q, k) if self.xl_positions is not None else None
        out, probs = scaled_dot_product_attention(q, k, v, mask, rel_k, rel_v, self.dropout, position_scores)
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_head)
        return self.out_proj(out), probs, present
