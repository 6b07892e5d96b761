"""Encoder and decoder layers: attention and position-wise feed-forward sublayers with residual + LayerNorm."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import KVPair, MultiHeadAttention
from model.config import ModelConfig
from model.dropout import Dropout
from model.linear_attention import LinearAttention
from model.positional import RelativePositions, XLRelativePositions


class FeedForward(nn.Module):
    """FFN(x) = W2 act(W1 x + b1) + b2 (act: ReLU, GELU or swish x * sigmoid(x)); gated variants (GLU family):
    W2 (act(W1 x) * W3 x)."""

    def __init__(self, d_model: int, d_ff: int, activation: str, dropout: float) -> None:
        super().__init__()
        self.gated = activation in ("swiglu", "geglu")
        self.act = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu, "swiglu": F.silu, "geglu": F.gelu}[activation]
        self.w1 = nn.Linear(d_model, d_ff)
        self.w3 = nn.Linear(d_model, d_ff) if self.gated else None
        self.w2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.act(self.w1(x))
        if self.w3 is not None:
            hidden = hidden * self.w3(x)
        return self.w2(self.dropout(hidden))


class Residual(nn.Module):
    """Residual connection around a sublayer with LayerNorm after (post-LN) or before (pre-LN) it."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], tuple[Tensor, ...]]) -> tuple[Tensor, tuple]:
        """Returns the new x and whatever else the sublayer returned (attention probabilities, cache)."""
        if self.pre_norm:
            out, *extra = sublayer(self.norm(x))
            return x + self.dropout(out), tuple(extra)
        out, *extra = sublayer(x)
        return self.norm(x + self.dropout(out)), tuple(extra)


def self_attention(cfg: ModelConfig, causal: bool) -> MultiHeadAttention:
    """The self-attention the config names: linear (kernel), or softmax attention with its relative positions
    (Shaw or Transformer-XL) if any. Sparse attention is softmax attention under a pattern mask (the Transformer
    builds the masks, model/sparse_attention.py)."""
    if cfg.attention == "linear":
        return LinearAttention(cfg.d_model, cfg.n_heads, causal)
    relative = xl = None
    if cfg.positional_encoding == "relative":
        relative = RelativePositions(cfg.relative_max_distance, cfg.d_head)
    elif cfg.positional_encoding == "xl_relative":
        xl = XLRelativePositions(cfg.max_positions, cfg.d_model, cfg.n_heads)
    return MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout, relative, xl)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        pre = cfg.norm_placement == "pre"
        self.self_attn = self_attention(cfg, causal=False)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.ffn_dropout)
        self.attn_residual = Residual(cfg.d_model, cfg.dropout, pre, cfg.layer_norm_eps)
        self.ffn_residual = Residual(cfg.d_model, cfg.dropout, pre, cfg.layer_norm_eps)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """x: (batch, src, d_model); mask: (batch, 1, 1, src). Returns x and probs (batch, heads, src, src)."""
        x, (probs, _) = self.attn_residual(x, lambda h: self.self_attn(h, mask))
        x, _ = self.ffn_residual(x, lambda h: (self.ffn(h),))
        return x, probs


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        pre = cfg.norm_placement == "pre"
        self.self_attn = self_attention(cfg, causal=True)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.ffn_dropout)
        self.self_residual = Residual(cfg.d_model, cfg.dropout, pre, cfg.layer_norm_eps)
        self.cross_residual = Residual(cfg.d_model, cfg.dropout, pre, cfg.layer_norm_eps)
        self.ffn_residual = Residual(cfg.d_model, cfg.dropout, pre, cfg.layer_norm_eps)

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor,
        cross_kv: KVPair,
        cross_mask: Tensor,
        past: KVPair | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, KVPair]:
        """x: (batch, tgt, d_model); self_mask: (tgt, past+tgt) causal; cross_mask: (batch, 1, 1, src).

        Returns x, self-attention probs (batch, heads, tgt, past+tgt), cross-attention probs
        (batch, heads, tgt, src) and the updated self-attention cache (linear attention: its running state, and
        self-attention weights over the new tokens only, (batch, heads, tgt, tgt)).
        """
        x, (self_probs, present) = self.self_residual(x, lambda h: self.self_attn(h, self_mask, past=past))
        x, (cross_probs, _) = self.cross_residual(x, lambda h: self.cross_attn(h, cross_mask, kv=cross_kv))
        x, _ = self.ffn_residual(x, lambda h: (self.ffn(h),))
        return x, self_probs, cross_probs, present
