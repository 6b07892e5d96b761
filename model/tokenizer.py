"""Joint SentencePiece subword tokenizer with fixed special-token ids (pad 0, bos 1, eos 2, unk 3)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_IDS = {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID}


def train_tokenizer(
    texts: Iterable[str],
    output: str | Path,
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    seed_sentencepiece_size: int = 200_000,
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
        byte_fallback=True,
        seed_sentencepiece_size=seed_sentencepiece_size,
        num_threads=2,
        minloglevel=2,
    )
    output.write_bytes(buffer.getvalue())
    return output


class Tokenizer:
    def __init__(self, model_file: str | Path) -> None:
        self.path = Path(model_file)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
        for name, expected in SPECIAL_IDS.items():
            actual = getattr(self.sp, f"{name}_id")()
            if actual != expected:
                raise ValueError(f"{self.path}: {name} id is {actual}, expected {expected}")

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode(list(texts))

    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]
