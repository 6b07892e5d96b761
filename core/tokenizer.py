"""SentencePiece tokenizer with fixed special ids (pad 0, bos 1, eos 2, unk 3); torch-free, shared by training."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_IDS = {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID}
# Up to this many texts are encoded one call each: sentencepiece's list call starts worker threads, which cost a
# request of one sentence 4x the CPU of encoding it (54 against 15 us, docs/engine-speed-log.md); a corpus gains
# from them.
SMALL_BATCH = 32
BYTE_PIECE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")  # byte fallback: a character outside the vocabulary, one UTF-8 byte


def source_mask(src, source_eos: bool = True):
    """True on the source positions the encoder reads (numpy or torch ids, right-padded with PAD_ID): every token,
    or, for a model that never saw a source EOS (ModelConfig.source_eos false), every token but EOS, which the
    engine appends to every source and which is then masked like padding (it is last, so no position moves). A source
    of EOS alone (an empty text: /v1/embed, /v1/attention) is then all masked: its attention probabilities are exact
    zeros (model/attention.py), a defined result; translating it needs no model (an empty translation)."""
    mask = src != PAD_ID
    return mask if source_eos else mask & (src != EOS_ID)


class Tokenizer:
    def __init__(self, model_file: str | Path) -> None:
        self.path = Path(model_file)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
        for name, expected in SPECIAL_IDS.items():
            actual = getattr(self.sp, f"{name}_id")()
            if actual != expected:
                raise ValueError(f"{self.path}: {name} id is {actual}, expected {expected}")
        self._spelled_in_bytes: dict[str, bool] = {}  # per character: at most the characters of Unicode

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = list(texts)
        if len(texts) <= SMALL_BATCH:
            return [self.sp.encode(text) for text in texts]
        return self.sp.encode(texts)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``; byte pieces that do not make valid UTF-8 (a character the model ended halfway) are
        dropped, never shown as U+FFFD."""
        return self.sp.decode([int(i) for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)]).replace("\ufffd", "")

    def spelled_in_bytes(self, char: str) -> bool:
        """Whether the vocabulary lacks ``char``, so that it is encoded as UTF-8 byte pieces (``<0xNN>``). The
        answer never changes and every translated text asks it of each of its characters: remembered."""
        known = self._spelled_in_bytes.get(char)
        if known is None:
            known = any(BYTE_PIECE.match(p) for p in self.pieces(self.encode(char)))
            self._spelled_in_bytes[char] = known
        return known

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return self.sp.id_to_piece([int(i) for i in ids])  # one call for the list
