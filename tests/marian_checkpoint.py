"""Small random Hugging Face Marian checkpoints built in the test: SentencePiece models trained on a few hundred
generated sentences, a vocab.json over both (as OPUS-MT's), a MarianMTModel from a MarianConfig, save_pretrained."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import sentencepiece as spm

from export.marian_vocab import NORMAL, read_pieces

SOURCE_WORDS = [
    "der",
    "die",
    "das",
    "ein",
    "eine",
    "Haus",
    "Katze",
    "Hund",
    "läuft",
    "schnell",
    "über",
    "den",
    "Garten",
    "und",
    "sieht",
    "einen",
    "Vogel",
    "am",
    "Himmel",
    "heute",
    "Morgen",
    "Straße",
    "Kinder",
    "spielen",
    "Ball",
    "Frau",
    "liest",
    "Buch",
    "Mann",
    "trinkt",
    "Kaffee",
    "Zug",
    "fährt",
    "nach",
    "Berlin",
    "grün",
    "blau",
]
TARGET_WORDS = [
    "the",
    "a",
    "house",
    "cat",
    "dog",
    "runs",
    "quickly",
    "over",
    "garden",
    "and",
    "sees",
    "bird",
    "in",
    "sky",
    "today",
    "morning",
    "street",
    "children",
    "play",
    "ball",
    "woman",
    "reads",
    "book",
    "man",
    "drinks",
    "coffee",
    "train",
    "goes",
    "to",
    "Berlin",
    "green",
    "blue",
]


def sentences(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 10))).capitalize() + "." for _ in range(n)]


def _train(lines: list[str], vocab_size: int) -> bytes:
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=out,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
    )
    return out.getvalue()


def write_tokenizer(directory: Path, drop_source_pieces: int = 0, joint: bool = False) -> dict[str, int]:
    """source.spm, target.spm and vocab.json ({"</s>": 0, "<unk>": 1, pieces..., "<pad>": last}); with
    ``drop_source_pieces``, that many source pieces are left out of vocab.json (Marian reads them as <unk>); with
    ``joint``, one SentencePiece model of both languages is both files (as an Argos package's sentencepiece.model)."""
    if joint:
        source = target = _train(sentences(SOURCE_WORDS, 300, 1) + sentences(TARGET_WORDS, 300, 2), 120)
    else:
        source, target = _train(sentences(SOURCE_WORDS, 300, 1), 80), _train(sentences(TARGET_WORDS, 300, 2), 70)
    (directory / "source.spm").write_bytes(source)
    (directory / "target.spm").write_bytes(target)
    source_pieces = [p.piece for p in read_pieces(source) if p.type == NORMAL]
    dropped = set(source_pieces[10 : 10 + drop_source_pieces])
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in source_pieces + [p.piece for p in read_pieces(target) if p.type == NORMAL]:
        if piece not in vocab and piece not in dropped:
            vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (directory / "tokenizer_config.json").write_text(json.dumps({"source_lang": "de", "target_lang": "en"}))
    return vocab


def write_checkpoint(
    directory: Path, seed: int = 0, drop_source_pieces: int = 0, eos_bias: float = 3.5, joint: bool = False, **config
) -> Path:
    """A random MarianMTModel saved with save_pretrained beside its tokenizer files; ``config`` overrides the tiny
    MarianConfig (OPUS-MT's choices by default: swish, scaled embeddings, pad banned). ``eos_bias``: EOS's
    final_logits_bias; a random model mostly ends at once or never, and this sets how many of its translations
    end before max_length."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    directory.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(directory, drop_source_pieces, joint)
    pad = vocab["<pad>"]
    settings = dict(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=None,
    )
    settings.update(config)
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**settings)).eval()
    with torch.no_grad():  # random weights as large as a trained model's, and a bias that matters
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.3)
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, settings["eos_token_id"]] = eos_bias
    model.generation_config.bad_words_ids = [[pad]]  # as OPUS-MT's configs: the decoder start is never generated
    model.generation_config.max_length = 40
    model.generation_config.num_beams = 4
    model.save_pretrained(directory)
    return directory
