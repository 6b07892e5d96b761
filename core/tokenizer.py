"""SentencePiece tokenizer with fixed special ids (pad 0, bos 1, eos 2, unk 3); torch-free, shared by training."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_IDS = {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID}


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
        return self.sp.decode([int(i) for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.sp.id_to_piece(int(i)) for i in ids]
