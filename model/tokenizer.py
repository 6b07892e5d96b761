"""Training of the joint SentencePiece tokenizer; the tokenizer itself lives in ``core.tokenizer`` (torch-free)."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_IDS, UNK_ID, Tokenizer

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "SPECIAL_IDS", "UNK_ID", "Tokenizer", "train_tokenizer"]


def train_tokenizer(
    texts: Iterable[str],
    output: str | Path,
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    seed_sentencepiece_size: int = 200_000,
    user_symbols: list[str] | None = None,
    byte_fallback: bool = True,
) -> Path:
    """Train SentencePiece on ``texts`` (the training split only) and write ``output`` (a .model file).

    Identity normalisation and byte fallback make detokenisation exact and leave no character
    unrepresentable: text the tokenizer never saw is spelled out as UTF-8 bytes instead of <unk>.
    """
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(texts)),
        model_writer=buffer,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        normalization_rule_name="identity",
        byte_fallback=byte_fallback,
        user_defined_symbols=list(user_symbols or []),
        seed_sentencepiece_size=seed_sentencepiece_size,
        input_sentence_size=2_000_000,
        shuffle_input_sentence=True,
        num_threads=2,
        minloglevel=2,
    )
    output.write_bytes(buffer.getvalue())
    return output
