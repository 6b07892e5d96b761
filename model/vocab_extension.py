"""Growing a released model's vocabulary, so that a new run can start from its weights (warm start).

A model trained for some directions is extended to more: the run's user symbols (target-language tags,
placeholders, the back-translation tag) and the characters of its training text that the old vocabulary spells in
UTF-8 byte pieces become new pieces at the end of the vocabulary, so every old id keeps its meaning and its learnt
row. A new character's row starts as the mean of its byte pieces' rows (what the model had learnt to read and write
it as); a new symbol's row starts at zero, which disturbs the old model least: tatoeba-de.test de->en, first 200,
greedy, with a ``<2en>`` tag: 41.4 BLEU from zero rows, 32.3 (5 loops) from rows drawn at the learnt rows' spread,
55.2 for the old model without a tag (docs/models-round3.md).

The SentencePiece model file is a protobuf ``ModelProto`` whose field 1 repeats the pieces; a parser merges a
repeated field's entries wherever they stand, so the new pieces are appended to the file as more field-1 entries
(no protobuf runtime needed: the generated module sentencepiece ships refuses the installed protobuf 6.33).
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from model.config import ModelConfig
from model.tokenizer import Tokenizer
from model.transformer import Transformer

NORMAL, USER_DEFINED = 1, 4  # SentencePiece's ModelProto.SentencePiece.Type values


@dataclass(frozen=True)
class NewPiece:
    piece: str
    kind: int  # NORMAL (a character) or USER_DEFINED (a symbol matched whole before segmentation)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _piece_entry(piece: NewPiece, score: float) -> bytes:
    """One ``ModelProto.pieces`` entry: field 1 (length-delimited) holding piece (1), score (2, float), type (3)."""
    text = piece.piece.encode("utf-8")
    body = b"\x0a" + _varint(len(text)) + text + b"\x15" + struct.pack("<f", score) + b"\x18" + _varint(piece.kind)
    return b"\x0a" + _varint(len(body)) + body


def extend_tokenizer_bytes(model_file: bytes, pieces: list[NewPiece], lowest_score: float) -> bytes:
    """The SentencePiece model ``model_file`` with ``pieces`` appended (ids from the old size on). New characters
    score below every old piece: a BPE merge never prefers them, they only make the character known."""
    return model_file + b"".join(_piece_entry(p, 0.0 if p.kind == USER_DEFINED else lowest_score - 1) for p in pieces)


def missing_characters(tokenizer: Tokenizer, texts: Iterable[str], min_count: int, limit: int) -> list[tuple[str, int]]:
    """Characters of ``texts`` the tokenizer spells in byte pieces, seen at least ``min_count`` times, most frequent
    first, at most ``limit`` (whitespace never: SentencePiece writes it as its own boundary piece)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(text)
    found = []
    for char, count in counts.most_common():
        if count < min_count or len(found) >= limit:
            break
        if not char.isspace() and tokenizer.spelled_in_bytes(char):
            found.append((char, count))
    return found


def byte_piece_ids(tokenizer: Tokenizer, char: str) -> list[int]:
    """The ids of the byte pieces (``<0xE4>``...) that spell ``char`` in UTF-8."""
    return [tokenizer.sp.piece_to_id(f"<0x{b:02X}>") for b in char.encode("utf-8")]


def extend_model(model: Transformer, tokenizer: Tokenizer, pieces: list[NewPiece]) -> Transformer:
    """A copy of ``model`` whose vocabulary has ``pieces`` appended: old rows unchanged, new rows as the module says."""
    cfg = ModelConfig.from_dict({**model.cfg.to_dict(), "vocab_size": model.cfg.vocab_size + len(pieces)})
    grown = Transformer(cfg)
    old = model.state_dict()
    state = grown.state_dict()
    for name, value in state.items():
        if name not in old:
            raise ValueError(f"{name}: not in the model being extended")
        if value.shape == old[name].shape:
            state[name] = old[name].clone()
            continue
        if value.shape[1:] != old[name].shape[1:] or value.shape[0] != old[name].shape[0] + len(pieces):
            raise ValueError(f"{name}: {tuple(old[name].shape)} cannot grow to {tuple(value.shape)}")
        rows = old[name]
        new = torch.empty((len(pieces), *rows.shape[1:]), dtype=rows.dtype)
        for i, piece in enumerate(pieces):
            if rows.dim() == 1:  # an output bias: a new piece starts at the mean
                new[i] = rows.mean()
            elif piece.kind == NORMAL:
                new[i] = rows[byte_piece_ids(tokenizer, piece.piece)].mean(dim=0)
            else:
                new[i] = 0.0
        state[name] = torch.cat([rows, new])
    grown.load_state_dict(state)
    grown.eval()
    return grown


def han_byte_share(tokenizer: Tokenizer, texts: Iterable[str]) -> float:
    """The share of the Han characters of ``texts`` that ``tokenizer`` spells in byte pieces."""
    han = [c for text in texts for c in text if "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf"]
    return sum(tokenizer.spelled_in_bytes(c) for c in han) / max(len(han), 1)


def extend_release(
    release_dir: str | Path,
    data_dir: str | Path,
    out_dir: str | Path,
    symbols: list[str],
    min_count: int = 20,
    limit: int = 4000,
) -> dict[str, Any]:
    """Write ``out_dir``: the release's model and tokenizer with ``symbols`` and the byte-spelt characters of
    ``data_dir``'s training text (tags stripped) appended; returns what ``report.json`` there says."""
    from model.checkpoint import TOKENIZER_FILE, load_release, save_release, tokenizer_path
    from model.data import read_parallel
    from model.directions import split_tag

    release_dir, out_dir = Path(release_dir), Path(out_dir)
    model, meta = load_release(release_dir)
    old_file = tokenizer_path(release_dir)
    tokenizer = Tokenizer(old_file)
    src, tgt = read_parallel(data_dir, "train", "src", "tgt")
    texts = [split_tag(t)[1] for t in src] + tgt
    already = [s for s in symbols if tokenizer.sp.piece_to_id(s) != tokenizer.sp.unk_id()]
    if already:
        raise ValueError(f"{old_file} already has {already}")
    chars = missing_characters(tokenizer, texts, min_count, limit)
    pieces = [NewPiece(s, USER_DEFINED) for s in symbols] + [NewPiece(c, NORMAL) for c, _ in chars]
    lowest = min(tokenizer.sp.get_score(i) for i in range(tokenizer.vocab_size))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / TOKENIZER_FILE).write_bytes(extend_tokenizer_bytes(old_file.read_bytes(), pieces, lowest))
    grown_tokenizer = Tokenizer(out_dir / TOKENIZER_FILE)
    if grown_tokenizer.vocab_size != tokenizer.vocab_size + len(pieces):
        raise ValueError(f"the extended tokenizer has {grown_tokenizer.vocab_size} pieces, not {len(pieces)} more")
    grown = extend_model(model, tokenizer, pieces)
    valid_src, valid_tgt = read_parallel(data_dir, "val", "src", "tgt")
    valid = [split_tag(t)[1] for t in valid_src] + valid_tgt
    report = {
        "from": str(release_dir),
        "data": str(data_dir),
        "old_vocab_size": tokenizer.vocab_size,
        "vocab_size": grown_tokenizer.vocab_size,
        "symbols": symbols,
        "characters_added": len(chars),
        "min_count": min_count,
        "rarest_added": chars[-1][1] if chars else None,
        "han_in_bytes_validation": {
            "before": han_byte_share(tokenizer, valid),
            "after": han_byte_share(grown_tokenizer, valid),
        },
    }
    extra = {k: v for k, v in meta.items() if k != "model"}
    save_release(out_dir, grown, {**extra, "extended": report})
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return report
