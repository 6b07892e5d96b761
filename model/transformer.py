"""The encoder-decoder Transformer: ``encode``, ``cross_kv``, incremental ``decode`` and teacher-forced ``forward``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from core.tokenizer import source_mask
from model.attention import KVPair
from model.config import ModelConfig
from model.dropout import Dropout
from model.layers import DecoderLayer, EncoderLayer
from model.positional import LearnedPositions, SinusoidalPositions, embedding_scale
from model.sparse_attention import SparsePattern


@dataclass
class EncoderOutput:
    memory: Tensor  # (batch, src, d_model)
    src_mask: Tensor  # (batch, src) bool, True on real tokens
    attention: list[Tensor]  # per layer (batch, heads, src, src)


@dataclass
class DecoderOutput:
    logits: Tensor  # (batch, tgt, vocab); decode(project=False): the unprojected states (batch, tgt, d_model)
    cache: list[KVPair]  # per layer (batch, heads, past+tgt, d_head) keys and values; linear: the running state
    self_attention: list[Tensor]  # per layer (batch, heads, tgt, past+tgt); linear attention (batch, heads, tgt, tgt)
    cross_attention: list[Tensor]  # per layer (batch, heads, tgt, src)


def causal_mask(n_queries: int, n_past: int | Tensor) -> Tensor:
    """(tgt, past+tgt) bool: query i (absolute position past+i) sees keys 0..past+i, never the future."""
    keys = torch.arange(n_queries + n_past)
    queries = torch.arange(n_queries) + n_past
    return keys.unsqueeze(0) <= queries.unsqueeze(1)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.src_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.tgt_embed = (
            self.src_embed if cfg.tie_embeddings else nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        )
        if cfg.positional_encoding == "sinusoidal":
            layout = cfg.sinusoidal_layout
            self.positions: nn.Module | None = SinusoidalPositions(cfg.max_positions, cfg.d_model, layout)
        elif cfg.positional_encoding == "learned":
            self.positions = LearnedPositions(cfg.max_positions, cfg.d_model)
        else:  # relative, xl_relative: positions enter inside self-attention only
            self.positions = None
        self.sparse: SparsePattern | None = (
            None  # sparse attention: the pattern masks encoder and decoder self-attention
        )
        if cfg.attention == "sparse":
            self.sparse = SparsePattern(cfg.sparse_window, cfg.sparse_stride, cfg.sparse_global)
        self.embed_dropout = Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        pre = cfg.norm_placement == "pre"
        self.encoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if pre else nn.Identity()
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.output_bias)
        self.embed_scale = embedding_scale(cfg.d_model) if cfg.scale_embedding else 1.0
        banned = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        banned[cfg.banned_ids] = True
        self.register_buffer("banned", banned, persistent=False)  # (vocab,) True: never generated
        self._init_weights()
        if cfg.tie_embeddings:
            self.output.weight = self.tgt_embed.weight

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and "positions" not in name and "relative" not in name:
                nn.init.xavier_uniform_(p)
        for emb in {self.src_embed, self.tgt_embed}:
            nn.init.normal_(emb.weight, std=self.cfg.d_model**-0.5)
            with torch.no_grad():
                emb.weight[self.cfg.pad_id].zero_()
        if self.output.bias is not None:
            nn.init.zeros_(self.output.bias)

    def _embed(self, tokens: Tensor, embedding: nn.Embedding, start: int | Tensor = 0) -> Tensor:
        x = embedding(tokens) * self.embed_scale  # (batch, len, d_model)
        if self.positions is not None:
            x = x + self.positions(torch.arange(tokens.size(1)) + start)
        return self.embed_dropout(x)

    def encode(self, src: Tensor) -> EncoderOutput:
        """src: (batch, src) token ids, right-padded with pad_id."""
        src_mask = source_mask(src, self.cfg.source_eos)
        attn_mask = src_mask[:, None, None, :]  # (batch, 1, 1, src)
        if self.sparse is not None:
            attn_mask = attn_mask & self.sparse.mask(src.size(1))  # (batch, 1, src, src)
        x = self._embed(src, self.src_embed)
        attention = []
        for layer in self.encoder_layers:
            x, probs = layer(x, attn_mask)
            attention.append(probs)
        return EncoderOutput(self.encoder_norm(x), src_mask, attention)

    def cross_kv(self, memory: Tensor) -> list[KVPair]:
        """Cross-attention keys/values of every decoder layer: depend on the source only, computed once."""
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder_layers]

    def decode(
        self,
        tgt: Tensor,
        cross_kv: list[KVPair],
        src_mask: Tensor,
        cache: list[KVPair] | None = None,
        n_past: int | Tensor | None = None,
        *,
        project: bool = True,
    ) -> DecoderOutput:
        """tgt: (batch, tgt) new target tokens following the ``cache`` of earlier ones (None = start).

        ``n_past``: how many tokens the cache holds; read from a key/value cache when not given, needed with a
        linear-attention running state (which has no length). ``project=False``: ``logits`` holds the decoder's last
        states, before the output projection.
        """
        if n_past is None:
            if cache is not None and self.cfg.attention == "linear":
                raise ValueError("a linear-attention state does not know its length: pass n_past")
            n_past = cache[0][0].size(2) if cache is not None else 0
        x = self._embed(tgt, self.tgt_embed, n_past)
        self_mask = None  # linear attention: causal by its running sums
        if self.cfg.attention != "linear":
            self_mask = causal_mask(tgt.size(1), n_past)
        if self.sparse is not None:
            self_mask = self_mask & self.sparse.mask(tgt.size(1), n_past)
        cross_mask = src_mask[:, None, None, :]
        new_cache, self_attention, cross_attention = [], [], []
        for i, layer in enumerate(self.decoder_layers):
            past = cache[i] if cache is not None else None
            x, self_probs, cross_probs, present = layer(x, self_mask, cross_kv[i], cross_mask, past)
            new_cache.append(present)
            self_attention.append(self_probs)
            cross_attention.append(cross_probs)
        x = self.decoder_norm(x)
        return DecoderOutput(self.output(x) if project else x, new_cache, self_attention, cross_attention)

    def log_probs(self, logits: Tensor) -> Tensor:
        """Float32 log-softmax over the vocabulary, -inf at the config's ``banned_ids`` (after the softmax: the other
        tokens keep the probabilities the model gives them)."""
        out = torch.log_softmax(logits.float(), dim=-1)
        if self.cfg.banned_ids:
            out = out.masked_fill(self.banned, float("-inf"))
        return out

    def forward(self, src: Tensor, tgt_in: Tensor, *, project: bool = True) -> Tensor:
        """Teacher forcing: logits (batch, tgt, vocab) for every target prefix in one pass; ``project=False``: the
        decoder's last states (batch, tgt, d_model) that ``self.output`` would project (the trainer projects them
        inside its loss, model/losses.py)."""
        enc = self.encode(src)
        return self.decode(tgt_in, self.cross_kv(enc.memory), enc.src_mask, project=project).logits

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
