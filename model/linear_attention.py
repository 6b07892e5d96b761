"""Kernel-based linear attention (Katharopoulos et al. 2020, "Transformers are RNNs").

softmax(q_i k_j^T) is replaced by the kernel phi(q_i)^T phi(k_j) with the feature map phi(x) = elu(x) + 1 (positive,
so every weight is >= 0 and each row normalizes), and the product is re-associated:

    V'_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / phi(q_i)^T (sum_j phi(k_j))                          (eq. 6)

sum_j phi(k_j) v_j^T (d x d) and sum_j phi(k_j) (d) are computed once for all queries: cost linear in the length.
Causal (decoder) form: the sums run over j <= i only,

    S_i = S_{i-1} + phi(k_i) v_i^T,   z_i = z_{i-1} + phi(k_i),   V'_i = phi(q_i)^T S_i / phi(q_i)^T z_i   (eq. 10-12)

so incremental decoding carries the running state (S, z), a fixed size whatever the length, instead of a key/value
cache that grows by one entry a token. Over the tokens of one call (teacher-forced training: the whole target)
``causal_linear_attention`` applies the same sums through the masked kernel (see there), which for sentence lengths
costs less than a stack of one S_i per position. Every normalizer gets + EPS, as in the authors' code
(fast-transformers): phi underflows to 0 in float32 below about -17.

Attention weights for the viewer: the output never forms a weight matrix. ``implied_weights`` computes the weights it
is equivalent to, A_ij = phi(q_i)^T phi(k_j) / sum_j' phi(q_i)^T phi(k_j') over the keys query i sees (V' = A V
exactly), for visualization only. In an incremental step the earlier keys are folded into the state and no longer
exist: the weights then cover the new tokens' keys only (normalized by the full sum, so such rows sum to less than 1).
Only self-attention is linear; cross-attention (keys computed once per source) stays softmax attention.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from model.attention import KVPair, MultiHeadAttention

EPS = 1e-6  # added to every normalizer phi(q_i)^T z_i
LinearState = KVPair  # (S (batch, heads, d_head, d_head) = sum_j phi(k_j) v_j^T, z (batch, heads, 1, d_head))


def elu_feature_map(x: Tensor) -> Tensor:
    """phi(x) = elu(x) + 1 > 0 (in float32 0 below about -17)."""
    return F.elu(x) + 1


def linear_attention(q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Non-causal (encoder): V'_i = phi(q_i)^T (phi(K)^T V) / phi(q_i)^T (phi(K)^T 1).

    q, k, v: (batch, heads, len, d_head); key_mask: bool broadcastable to (batch, heads, 1, src), True on real keys
    (padded keys contribute nothing). Returns the output and the implied weights (batch, heads, len, src).
    """
    phi_q = elu_feature_map(q)
    phi_k = elu_feature_map(k) * key_mask.transpose(-2, -1)  # (batch, heads, src, d_head), zero on padding
    s = phi_k.transpose(-2, -1) @ v  # (batch, heads, d_head, d_head): sum_j phi(k_j) v_j^T
    z = phi_k.sum(dim=2, keepdim=True)  # (batch, heads, 1, d_head): sum_j phi(k_j)
    normalizer = phi_q @ z.transpose(-2, -1) + EPS  # (batch, heads, len, 1)
    out = (phi_q @ s) / normalizer
    return out, implied_weights(phi_q, phi_k, normalizer)


def causal_linear_attention(
    q: Tensor, k: Tensor, v: Tensor, state: LinearState | None = None
) -> tuple[Tensor, Tensor, LinearState]:
    """Causal (decoder): running sums S_i, z_i over the tokens so far, continuing ``state`` (earlier tokens).

    Within one call phi(q_i)^T S_i is computed as state + sum_{j<=i} (phi(q_i)^T phi(k_j)) v_j^T, the masked
    kernel times V: the same sum re-associated (eq. 10-12 unrolled), with the (tgt x tgt) kernel the implied weights
    need anyway instead of a (tgt, d_head, d_head) stack of S_i. For sentence lengths (tgt <= a few hundred,
    d_head 64) it is the cheaper form, in memory and time, of teacher-forced training; the state carried between
    calls (incremental decoding) is the running sum itself, a fixed (d_head x d_head) whatever the length.

    q, k, v: (batch, heads, tgt, d_head) of the new tokens. Returns the output, the implied weights over the new
    tokens' keys (batch, heads, tgt, tgt) and the state after the last new token.
    """
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    n = q.size(2)
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    kernel = (phi_q @ phi_k.transpose(-2, -1)).masked_fill(~causal, 0.0)  # phi(q_i)^T phi(k_j), j <= i
    numerator = kernel @ v  # sum_{j<=i} phi(q_i)^T phi(k_j) v_j^T
    normalizer = kernel.sum(dim=-1, keepdim=True)  # phi(q_i)^T sum_{j<=i} phi(k_j)
    s, z = phi_k.transpose(-2, -1) @ v, phi_k.sum(dim=2, keepdim=True)  # this call's sums over all new tokens
    if state is not None:
        numerator = numerator + phi_q @ state[0]
        normalizer = normalizer + phi_q @ state[1].transpose(-2, -1)
        s, z = s + state[0], z + state[1]
    normalizer = normalizer + EPS
    return numerator / normalizer, kernel / normalizer, (s, z)


def implied_weights(phi_q: Tensor, phi_k: Tensor, normalizer: Tensor, mask: Tensor | None = None) -> Tensor:
    """A_ij = phi(q_i)^T phi(k_j) / phi(q_i)^T z_i, zero where ``mask`` (tgt, src) is False: visualization only."""
    kernel = phi_q @ phi_k.transpose(-2, -1)  # (batch, heads, tgt, src)
    if mask is not None:
        kernel = kernel.masked_fill(~mask, 0.0)
    return kernel / normalizer


class LinearAttention(MultiHeadAttention):
    """Multi-head linear attention: the projections of ``MultiHeadAttention``, the kernel form instead of softmax.

    ``causal`` (decoder self-attention): the cache is the running state (S, z) of every head, not keys/values.
    """

    def __init__(self, d_model: int, n_heads: int, causal: bool) -> None:
        super().__init__(d_model, n_heads)
        self.causal = causal

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        kv: KVPair | None = None,
        past: LinearState | None = None,
    ) -> tuple[Tensor, Tensor, LinearState | None]:
        """x: (batch, len, d_model). mask: key padding (batch, 1, 1, len) when not causal; causal ignores it (the
        running sums hold earlier tokens only). Returns the output, the implied weights and the new state (causal)."""
        if kv is not None:
            raise ValueError("linear attention is self-attention only; cross-attention stays MultiHeadAttention")
        q = self._split(self.q_proj(x))
        k, v = self.project_kv(x)
        if self.causal:
            out, weights, present = causal_linear_attention(q, k, v, past)
        else:
            key_mask = mask if mask is not None else torch.ones(1, 1, 1, k.size(2), dtype=torch.bool)
            (out, weights), present = linear_attention(q, k, v, key_mask), None
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_head)
        return self.out_proj(out), weights, present
