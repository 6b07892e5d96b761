"""SentencePiece tokenizer: exact round trip with byte fallback, fixed special ids."""

from __future__ import annotations

import io
import random

import pytest
import sentencepiece as spm

from model.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer

GERMAN = "der die das ein eine Mann Frau Hund Katze Kind spielt läuft sitzt auf dem Rasen grünen über Brücke schöne"
ENGLISH = "the a man woman dog cat child plays runs sits on lawn green over bridge beautiful small big"
VOCAB = 400  # 256 byte pieces + 4 special ids + characters + merges


def _corpus(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for words in (GERMAN.split(), ENGLISH.split()):
        for _ in range(n):
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))
            lines.append(sentence[0].upper() + sentence[1:] + rng.choice([".", "!", "?", ","]))
    return lines


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    path = train_tokenizer(_corpus(), tmp_path_factory.mktemp("tok") / "sub" / "tokenizer.model", VOCAB)
    assert path.is_file()
    return Tokenizer(path)


def test_special_ids_and_vocab_size(tokenizer):
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    sp = tokenizer.sp
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2, 3)
    assert tokenizer.vocab_size == VOCAB
    assert tokenizer.pieces([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]


@pytest.mark.parametrize(
    "text",
    [
        "Ein Mann spielt auf dem grünen Rasen.",
        "The dog runs over the bridge!",
        "Die Straße ist groß und kostet 5 €.",  # ß, € never seen in training
        "你好, world",  # Chinese: only byte pieces
        "Ünïcödé ǅ 😀 tab\tin the middle",
        "Zahlen 0123456789 und Zeichen #@%&*()[]{}<>",
    ],
)
def test_decode_of_encode_is_the_input(tokenizer, text):
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert UNK_ID not in ids  # byte fallback: nothing becomes <unk>
    assert all(0 <= i < tokenizer.vocab_size for i in ids)


def test_unseen_characters_are_spelled_as_utf8_bytes(tokenizer):
    pieces = tokenizer.pieces(tokenizer.encode("ß"))
    assert pieces[-2:] == ["<0xC3>", "<0x9F>"]  # UTF-8 of U+00DF
    pieces = tokenizer.pieces(tokenizer.encode("你"))
    assert pieces[-3:] == ["<0xE4>", "<0xBD>", "<0xA0>"]


def test_frequent_words_become_single_pieces(tokenizer):
    assert len(tokenizer.encode("the")) <= 2  # '▁the' or '▁' + 'the'
    assert len(tokenizer.encode("Mann Frau Hund")) < len("Mann Frau Hund")


def test_decode_drops_pad_bos_eos_and_batches_match_single_calls(tokenizer):
    texts = ["Ein Hund läuft.", "A cat sits on the lawn."]
    batch = tokenizer.encode_batch(texts)
    assert batch == [tokenizer.encode(t) for t in texts]
    for ids, text in zip(batch, texts, strict=True):
        assert tokenizer.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == text


def test_a_model_with_other_special_ids_is_rejected(tmp_path):
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_corpus(50)), model_writer=buffer, vocab_size=60, minloglevel=2
    )  # SentencePiece defaults: unk 0, bos 1, eos 2, no pad
    path = tmp_path / "default_ids.model"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(ValueError, match="expected"):
        Tokenizer(path)


def test_batch_encoding_is_encoding_each_text(tokenizer):
    """Small lists are encoded a text at a time, large ones in sentencepiece's threaded call: the same ids."""
    from core.tokenizer import SMALL_BATCH

    texts = _corpus(40, seed=3) + ["Die Straße kostet 5 €.", "", "你好"]
    for n in (1, SMALL_BATCH, SMALL_BATCH + 1, len(texts)):
        assert tokenizer.encode_batch(texts[:n]) == [tokenizer.sp.encode(t) for t in texts[:n]]


def test_spelled_in_bytes_names_the_characters_outside_the_vocabulary(tokenizer):
    assert not tokenizer.spelled_in_bytes("a") and not tokenizer.spelled_in_bytes("ü")
    for char in ("€", "你", "😀"):  # never seen in training: UTF-8 byte pieces
        assert tokenizer.spelled_in_bytes(char)
        assert all(p.startswith("<0x") for p in tokenizer.pieces(tokenizer.encode(char)) if p != "▁")
    assert tokenizer.spelled_in_bytes("€")  # asked again: the remembered answer
