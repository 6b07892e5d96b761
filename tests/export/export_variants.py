"""Tiny random Transformers of every architecture variant, exported to ONNX and sealed as minimal bundles.

The module name is unique across tests/ because pytest imports each test folder's modules (no __init__.py)
by their bare names.
Three exports plus the tiny trained bundle cover every option of the model config (see ``covered_options``).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import torch

from core.tokenizer import Tokenizer
from export.manifest import build_manifest, seal
from export.onnx_export import export_graphs
from export.pack import pack_bundle
from model.config import ModelConfig
from model.transformer import Transformer

# name -> overrides of the tiny config; together with the tiny bundle (sinusoidal, post, relu, tied, vanilla)
# every positional encoding, attention, norm placement, activation and both embedding tyings are exported.
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "learned-pre-gelu-untied": dict(
        positional_encoding="learned", norm_placement="pre", activation="gelu", tie_embeddings=False
    ),
    "relative-post-swiglu-2dec": dict(
        positional_encoding="relative", norm_placement="post", activation="swiglu", n_decoder_layers=2
    ),
    "relative-pre-geglu-untied-2enc": dict(
        positional_encoding="relative",
        norm_placement="pre",
        activation="geglu",
        tie_embeddings=False,
        n_encoder_layers=2,
    ),
    "sparse-xl_relative-pre-gelu": dict(
        attention="sparse",
        sparse_window=2,
        sparse_stride=5,
        sparse_global=1,
        positional_encoding="xl_relative",
        norm_placement="pre",
        activation="gelu",
    ),
    "linear-learned-post-2dec": dict(attention="linear", positional_encoding="learned", n_decoder_layers=2),
    # an imported Marian model's options (export/marian.py)
    "halves-swish-unscaled-bias-banned": dict(
        activation="swish", sinusoidal_layout="halves", scale_embedding=False, output_bias=True, banned_ids=[1, 5]
    ),
}
MAX_POSITIONS = 160  # source 100 and cache 50 (+ a few new tokens) fit


def tiny_random_config(vocab_size: int, **overrides: Any) -> ModelConfig:
    values: dict[str, Any] = dict(
        vocab_size=vocab_size,
        d_model=16,
        n_heads=2,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_ff=32,
        dropout=0.0,
        max_positions=MAX_POSITIONS,
        relative_max_distance=8,
    )
    values.update(overrides)
    return ModelConfig(**values)


def random_model(cfg: ModelConfig, seed: int = 0) -> Transformer:
    """Random weights; biases and LayerNorm gains moved off their 0 / 1 initial values so they matter."""
    torch.manual_seed(seed)
    model = Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def write_bundle(model: Transformer, tokenizer_file: Path, out: Path, name: str = "variant") -> Path:
    """Export fp32 graphs, pack them (format 2, export/pack.py) and seal a minimal bundle (manifest built by the
    real export code) in ``out``."""
    if out.exists():
        shutil.rmtree(out)
    export_graphs(model, out / "fp32")
    shutil.copy(tokenizer_file, out / "tokenizer.model")
    vocab = Tokenizer(out / "tokenizer.model").vocab_size
    if vocab != model.cfg.vocab_size:
        raise ValueError(f"tokenizer has {vocab} pieces, the model {model.cfg.vocab_size}")
    manifest = build_manifest(
        out,
        name=name,
        version=1,
        source_language="de",
        target_language="en",
        model_config=model.cfg.to_dict(),
        parameters=model.num_parameters(),
        variants=pack_bundle(out, {"fp32": {"encoder": "fp32/encoder.onnx", "decoder": "fp32/decoder.onnx"}})[0],
        vocab_size=model.cfg.vocab_size,
        training={"note": "random weights, parity test only"},
    )
    seal(out, manifest)
    return out


def random_shapes(n: int, max_positions: int, seed: int = 0) -> list[tuple[int, int, int, int]]:
    """(batch, src, tgt, past) with batch 1..16, src 1..100, cache 0..50, clipped to the model's positions.

    The edge cases always come first: one token of source and target without a cache, the largest
    batch / source / cache, and a teacher-forced target (many tokens, no cache).
    """
    src_max, past_max = min(100, max_positions), min(50, max_positions - 3)
    shapes = [(1, 1, 1, 0), (16, src_max, 1, past_max), (3, 9, 7, 0), (2, 1, 3, past_max)]
    rng = random.Random(seed)
    while len(shapes) < n:
        tgt = rng.choice([1, 1, 3])
        shapes.append((rng.randint(1, 16), rng.randint(1, src_max), tgt, rng.randint(0, min(past_max, 50))))
    return shapes
