"""Toy tasks, tiny configs and a tiny parallel corpus shared by the model tests.

The module name is unique across tests/ because pytest imports each test folder's modules (no __init__.py)
by their bare names.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from model.config import ModelConfig, RunConfig, TokenizerConfig, TrainConfig
from model.data import pad
from model.losses import label_smoothed_nll
from model.transformer import Transformer

PAD, BOS, EOS = 0, 1, 2
TOY_VOCAB = 14  # 4 special ids + 10 symbols
FIRST_SYMBOL = 4


def tiny_config(**overrides) -> ModelConfig:
    values = dict(
        vocab_size=TOY_VOCAB,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.0,
        max_positions=32,
        relative_max_distance=4,
    )
    values.update(overrides)
    return ModelConfig(**values)


def toy_pairs(n: int, task: str, generator: torch.Generator, min_len: int = 3, max_len: int = 6):
    """Random symbol sequences and their targets for the ``copy`` or ``reverse`` task."""
    pairs = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=generator))
        seq = torch.randint(FIRST_SYMBOL, TOY_VOCAB, (length,), generator=generator).tolist()
        pairs.append((seq, seq[::-1] if task == "reverse" else list(seq)))
    return pairs


def toy_batch(pairs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src, tgt_in, tgt_out): source + eos; bos + target; target + eos; right-padded with pad."""
    src = pad([s + [EOS] for s, _ in pairs])
    tgt = pad([[BOS] + t + [EOS] for _, t in pairs])
    return src, tgt[:, :-1], tgt[:, 1:]


def train_toy(model: Transformer, task: str, steps: int, lr: float = 3e-3, batch_size: int = 64, seed: int = 1):
    """Teacher-forced training with Adam; returns the per-step mean NLL per target token."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
    model.train()
    losses = []
    for _ in range(steps):
        src, tgt_in, tgt_out = toy_batch(toy_pairs(batch_size, task, generator))
        loss_sum, _ = label_smoothed_nll(model(src, tgt_in), tgt_out, 0.0, PAD)
        loss = loss_sum / (tgt_out != PAD).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


# --- a tiny parallel corpus for Trainer ----------------------------------------------------------

GERMAN = "der die das ein mann frau hund katze kind ball rot blau gross klein auf unter spielt rennt sitzt und"
ENGLISH = "the the the a man woman dog cat child ball red blue big small on under plays runs sits and"
WORD_MAP = dict(zip(GERMAN.split(), ENGLISH.split(), strict=True))
CORPUS_VOCAB = 300  # byte fallback alone takes 256 pieces + 4 special ids


def write_corpus(directory: Path, n_train: int = 240, n_valid: int = 12, seed: int = 0) -> Path:
    """train.de/en and val.de/en: random German word strings and their word-by-word 'translation'."""
    rng = random.Random(seed)
    words = sorted(WORD_MAP)
    directory.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("val", n_valid)):
        de = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 7))) for _ in range(n)]
        en = [" ".join(WORD_MAP[w] for w in line.split()) for line in de]
        (directory / f"{prefix}.de").write_text("\n".join(de) + "\n", encoding="utf-8")
        (directory / f"{prefix}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    return directory


def tiny_run(**train_overrides) -> RunConfig:
    """A RunConfig small enough to train a few steps on the tiny corpus in well under a second."""
    train = dict(
        max_tokens=160,
        max_length=40,
        warmup_steps=10,
        epochs=3,
        max_steps=0,
        eval_every=1000,
        keep_checkpoints=3,
        bleu_max_sentences=4,
        seed=7,
        threads=1,
    )
    train.update(train_overrides)
    return RunConfig(
        name="tiny",
        tokenizer=TokenizerConfig(vocab_size=CORPUS_VOCAB),
        model=ModelConfig(
            vocab_size=CORPUS_VOCAB,
            d_model=16,
            n_heads=2,
            n_encoder_layers=1,
            n_decoder_layers=1,
            d_ff=32,
            dropout=0.1,
            max_positions=64,
        ),
        train=TrainConfig(**train),
    )
