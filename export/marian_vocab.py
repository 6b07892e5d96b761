"""An imported Marian model's vocabulary in our id order, and the one SentencePiece model that tokenizes it.

A Hugging Face Marian checkpoint has two SentencePiece models (``source.spm``, ``target.spm``) whose pieces are
mapped to ids by one ``vocab.json``: a source text is cut into pieces by the source model, each piece looked up in
vocab.json (``<unk>`` when missing); a target is the vocab.json pieces of its ids. The special ids are Marian's
(``</s>`` 0, ``<unk>`` 1, ``<pad>`` last, the pad token also the decoder's start), ours are fixed (core/tokenizer.py:
pad 0, bos 1, eos 2, unk 3) and the whole service relies on them. So the import renumbers the vocabulary
(``VocabMap``) and moves the embedding, output and bias rows with it (export/marian.py):

- ours 0 (pad): Marian's pad row, never generated (its logit is -inf: it would count Marian's pad twice);
- ours 1 (bos, the decoder start): Marian's decoder start (its pad), a real output of the model;
- ours 2 (eos), 3 (unk): Marian's;
- ours 4...: every other Marian id in increasing order;
- then aliases: pieces of source.spm or target.spm that vocab.json lacks. Marian reads them as ``<unk>``; here they
  keep their place in their SentencePiece model (so text is cut exactly as that model cuts it), embed as Marian's
  unk and are never generated.

``merged_sentencepiece`` writes one SentencePiece model over these ids for each side: the side's normalizer, scores
and piece types for its own pieces (its encoding equals the side's model's), the other pieces as UNUSED (never
produced by encoding, decoded as their text). The source one is the bundle's tokenizer, the target one cuts target
text (glossary terms, a given target) as target.spm does. Both are written on the protobuf wire format (field
numbers of sentencepiece's sentencepiece_model.proto) because the installed protobuf runtime may not load
sentencepiece's generated module.
``check_encoding`` compares the two tokenizations on texts.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import sentencepiece as spm

from core.onnx_wire import encode_varint, fields, raw_fields
from core.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# sentencepiece_model.proto: ModelProto.pieces (1), .trainer_spec (2), .normalizer_spec (3), .self_test_data (4),
# .denormalizer_spec (5); SentencePiece.piece (1), .score (2), .type (3)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# TrainerSpec.vocab_size (4), .unk_id (40), .bos_id (41), .eos_id (42), .pad_id (43), .unk_piece (45),
# .bos_piece (46), .eos_piece (47), .pad_piece (48)
TRAINER_IDS = {4, 40, 41, 42, 43, 45, 46, 47, 48}
SPECIAL_PIECES = ("<pad>", "<s>", "</s>", "<unk>")  # ours 0..3


@dataclass
class SourcePiece:
    piece: str
    score: float
    type: int


def read_pieces(model_proto: bytes) -> list[SourcePiece]:
    """The pieces of a serialized SentencePiece model, in id order."""
    out = []
    for number, value in fields(model_proto):
        if number == 1:
            piece, score, kind = "", 0.0, NORMAL
            for f, v in fields(value):  # type: ignore[arg-type]
                if f == 1:
                    piece = v.decode("utf-8")  # type: ignore[union-attr]
                elif f == 2:
                    score = struct.unpack("<f", v)[0]  # type: ignore[arg-type]
                elif f == 3:
                    kind = int(v)  # type: ignore[arg-type]
            out.append(SourcePiece(piece, score, kind))
    return out


@dataclass
class VocabMap:
    """Our vocabulary in terms of Marian's: ``marian_ids[ours]`` is the Marian row our id reads; ``pieces[ours]`` its
    text; ``excluded``: our ids whose logit is -inf (pad's duplicate, the aliases)."""

    marian_ids: list[int]
    pieces: list[str]
    excluded: list[int]

    @property
    def size(self) -> int:
        return len(self.marian_ids)

    def ours(self) -> dict[int, int]:
        """Marian id -> our id (the generated one for Marian's pad: ours 1)."""
        out: dict[int, int] = {}
        for our_id, marian_id in enumerate(self.marian_ids):
            if our_id not in self.excluded:
                out.setdefault(marian_id, our_id)
        return out


def vocab_map(vocab: dict[str, int], spm_pieces: list[SourcePiece], eos: int, pad: int, start: int) -> VocabMap:
    """Renumber Marian's vocabulary (vocab.json: piece -> id) so that ours has the fixed special ids; ``spm_pieces``:
    the pieces of both SentencePiece models (those vocab.json lacks become aliases of <unk>)."""
    by_id = {i: p for p, i in vocab.items()}
    if len(by_id) != len(vocab) or sorted(by_id) != list(range(len(vocab))):
        raise ValueError("vocab.json must map its pieces to the ids 0..N-1, each once")
    if "<unk>" not in vocab:
        raise ValueError("vocab.json has no <unk> piece")
    if start != pad:
        raise ValueError(f"decoder_start_token_id {start} is not the pad token {pad}, as every Marian model has")
    if "<s>" in vocab:
        raise ValueError("vocab.json holds a <s> piece: our decoder start takes that name")
    pieces = [by_id[i] for i in range(len(vocab))]
    return renumbered(pieces, [pad, start, eos, vocab["<unk>"]], [PAD_ID], spm_pieces)


def renumbered(
    pieces: list[str], special_rows: list[int], excluded: list[int], spm_pieces: list[SourcePiece]
) -> VocabMap:
    """Our vocabulary over another model's (``pieces``: its vocabulary in its id order): our special ids 0..3 read
    ``special_rows`` (pad, decoder start, eos, unk), every row none of them reads follows in increasing order, then
    the aliases (pieces of ``spm_pieces`` the vocabulary lacks, read as its unk row). ``excluded``: our special ids
    never generated (the aliases never are either)."""
    unk = special_rows[UNK_ID]
    rest = [i for i in range(len(pieces)) if i not in special_rows]
    marian_ids = [*special_rows, *rest]
    ours = [*SPECIAL_PIECES, *(pieces[i] for i in rest)]
    excluded = list(excluded)
    known = set(pieces) | set(ours)
    for sp in spm_pieces:
        if sp.type in (NORMAL, USER_DEFINED, BYTE) and sp.piece not in known:
            excluded.append(len(marian_ids))
            marian_ids.append(unk)
            ours.append(sp.piece)
            known.add(sp.piece)
    return VocabMap(marian_ids, ours, excluded)


def _field(number: int, value: int | bytes | float) -> bytes:
    if isinstance(value, bytes):
        return encode_varint(number << 3 | 2) + encode_varint(len(value)) + value
    if isinstance(value, float):
        return encode_varint(number << 3 | 5) + struct.pack("<f", value)
    return encode_varint(number << 3) + encode_varint(value)


def merged_sentencepiece(side_proto: bytes, vmap: VocabMap) -> bytes:
    """One SentencePiece model over our ids: the side's model's cutting, every vocabulary piece's text (see the
    module docstring)."""
    own = {sp.piece: sp for sp in read_pieces(side_proto)}
    body = b""
    for our_id, piece in enumerate(vmap.pieces):
        if our_id < len(SPECIAL_PIECES):
            kind, score = (UNKNOWN if our_id == UNK_ID else CONTROL), 0.0
        elif piece in own and own[piece].type in (NORMAL, USER_DEFINED, BYTE):
            kind, score = own[piece].type, own[piece].score
        elif piece in own and own[piece].type == CONTROL:
            kind, score = CONTROL, 0.0
        else:  # a piece of the other side's model (or one this model never produces): decoded, never encoded
            kind, score = UNUSED, 0.0
        body += _field(1, _field(1, piece.encode("utf-8")) + _field(2, float(score)) + _field(3, kind))
    for number, raw in raw_fields(side_proto):
        if number == 2:  # trainer spec: our special ids and vocabulary size
            trainer = b"".join(r for n, r in raw_fields(_payload(raw)) if n not in TRAINER_IDS)
            trainer += _field(4, vmap.size)
            for number_id, value in ((40, UNK_ID), (41, BOS_ID), (42, EOS_ID), (43, PAD_ID)):
                trainer += _field(number_id, value)
            for number_piece, our_id in ((45, UNK_ID), (46, BOS_ID), (47, EOS_ID), (48, PAD_ID)):
                trainer += _field(number_piece, SPECIAL_PIECES[our_id].encode())
            body += _field(2, trainer)
        elif number in (3, 5):  # normalizer and denormalizer: the side's model's, unchanged
            body += raw
    return body


def _payload(raw_field: bytes) -> bytes:
    """The bytes of a length-delimited field, from its whole encoding."""
    ((_, value),) = list(fields(raw_field))
    return value  # type: ignore[return-value]


def marian_encode(side: spm.SentencePieceProcessor, vocab: dict[str, int], text: str) -> list[int]:
    """Marian's ids of a text cut by one side's model (MarianTokenizer without its optional Moses punctuation
    normalizer), EOS excluded."""
    unk = vocab["<unk>"]
    return [vocab.get(piece, unk) for piece in side.encode(text, out_type=str)]


def check_encoding(
    merged: spm.SentencePieceProcessor,
    side: spm.SentencePieceProcessor,
    vocab: dict[str, int],
    vmap: VocabMap,
    texts: Sequence[str],
) -> list[str]:
    """The texts whose merged-model ids, read as Marian ids, differ from Marian's own: empty when all agree."""
    return [
        text for text in texts if [vmap.marian_ids[i] for i in merged.encode(text)] != marian_encode(side, vocab, text)
    ]
