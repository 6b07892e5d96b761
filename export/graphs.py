"""The two ONNX graphs of a bundle, as torch modules around a trained Transformer.

encoder: src_ids (batch, src) -> encoder_output (batch, src, d_model), encoder_attention
         (layers, batch, heads, src, src), cross_keys / cross_values (dec_layers, batch, heads, src, d_head):
         the cross-attention keys/values are computed here, once per source, never per decoding step.
decoder: tokens (batch, tgt) after a cache of past_len tokens -> log_probs (batch, tgt, vocab),
         present_keys / present_values (dec_layers, batch, heads, past_len + tgt, d_head),
         self_attention (dec_layers, batch, heads, tgt, past_len + tgt), cross_attention
         (dec_layers, batch, heads, tgt, src). One token per call for search; the whole target at
         past_len 0 scores a given target (teacher forcing) in one call.
         Linear attention (``LinearStateDecoderGraph``): the running state past_kv_sums (dec_layers, batch, heads,
         d_head, d_head), past_k_sums (dec_layers, batch, heads, 1, d_head) and past_length (1,) instead of
         past keys/values; self_attention (dec_layers, batch, heads, tgt, tgt) over the new tokens.
Their input and output names are the graph interface defined in ``core/graphs.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model.linear_attention import elu_feature_map
from model.transformer import Transformer


class EncoderGraph(nn.Module):
    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        enc = self.model.encode(src_ids)
        kv = self.model.cross_kv(enc.memory)
        return (
            enc.memory,
            torch.stack(enc.attention),
            torch.stack([k for k, _ in kv]),
            torch.stack([v for _, v in kv]),
        )


class DecoderGraph(nn.Module):
    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        tokens: Tensor,
        src_mask: Tensor,
        cross_keys: Tensor,
        cross_values: Tensor,
        past_keys: Tensor,
        past_values: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        n_layers = len(self.model.decoder_layers)
        kv = [(cross_keys[i], cross_values[i]) for i in range(n_layers)]
        cache = [(past_keys[i], past_values[i]) for i in range(n_layers)]
        out = self.model.decode(tokens, kv, src_mask, cache)
        return (
            self.model.log_probs(out.logits),
            torch.stack([k for k, _ in out.cache]),
            torch.stack([v for _, v in out.cache]),
            torch.stack(out.self_attention),
            torch.stack(out.cross_attention),
        )


class LinearStateDecoderGraph(nn.Module):
    """decoder.onnx of a linear-attention model: the self-attention cache is the running state (core/graphs.py)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        tokens: Tensor,
        src_mask: Tensor,
        cross_keys: Tensor,
        cross_values: Tensor,
        past_kv_sums: Tensor,
        past_k_sums: Tensor,
        past_length: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        n_layers = len(self.model.decoder_layers)
        kv = [(cross_keys[i], cross_values[i]) for i in range(n_layers)]
        state = [(past_kv_sums[i], past_k_sums[i]) for i in range(n_layers)]
        out = self.model.decode(tokens, kv, src_mask, state, n_past=past_length)
        return (
            self.model.log_probs(out.logits),
            torch.stack([s for s, _ in out.cache]),
            torch.stack([z for _, z in out.cache]),
            torch.stack(out.self_attention),
            torch.stack(out.cross_attention),
        )


def decoder_graph(model: Transformer) -> nn.Module:
    return LinearStateDecoderGraph(model) if model.cfg.attention == "linear" else DecoderGraph(model)


def example_inputs(model: Transformer, batch: int = 2, src: int = 7, tgt: int = 1, past: int = 3) -> dict[str, Tensor]:
    """Random inputs of both graphs; with a linear-attention model, a running state of ``past`` tokens' keys/values
    (the sums of phi(k) v^T and phi(k) of random keys and values) instead of a key/value cache."""
    cfg = model.cfg
    n_layers = cfg.n_decoder_layers
    src_ids = torch.randint(4, cfg.vocab_size, (batch, src))
    src_ids[0, -2:] = cfg.pad_id
    if cfg.attention == "linear":
        phi_k = elu_feature_map(torch.randn(n_layers, batch, cfg.n_heads, past, cfg.d_head))
        values = torch.randn(n_layers, batch, cfg.n_heads, past, cfg.d_head)
        return {
            "src_ids": src_ids,
            "tokens": torch.randint(4, cfg.vocab_size, (batch, tgt)),
            "src_mask": src_ids != cfg.pad_id,
            "cross_keys": torch.randn(n_layers, batch, cfg.n_heads, src, cfg.d_head),
            "cross_values": torch.randn(n_layers, batch, cfg.n_heads, src, cfg.d_head),
            "past_kv_sums": phi_k.transpose(-2, -1) @ values,
            "past_k_sums": phi_k.sum(dim=3, keepdim=True),
            "past_length": torch.tensor([past]),
        }
    return {
        "src_ids": src_ids,
        "tokens": torch.randint(4, cfg.vocab_size, (batch, tgt)),
        "src_mask": src_ids != cfg.pad_id,
        "cross_keys": torch.randn(n_layers, batch, cfg.n_heads, src, cfg.d_head),
        "cross_values": torch.randn(n_layers, batch, cfg.n_heads, src, cfg.d_head),
        "past_keys": torch.randn(n_layers, batch, cfg.n_heads, past, cfg.d_head),
        "past_values": torch.randn(n_layers, batch, cfg.n_heads, past, cfg.d_head),
    }
