"""Growing a released model's vocabulary for a warm-started run (model/vocab_extension.py, ``model.cli extend-vocab``):
old ids and rows unchanged, tags and byte-spelt characters become single pieces, new rows start where the module
says, and a run starts from the result with ``train.init_from``."""

from __future__ import annotations

import json

import pytest
import torch

from model.checkpoint import load_release, save_release
from model.cli import main
from model.config import ModelConfig
from model.tokenizer import Tokenizer, train_tokenizer
from model.transformer import Transformer
from model.vocab_extension import NORMAL, NewPiece, byte_piece_ids, extend_model, missing_characters

GERMAN = ["der Hund läuft über die Wiese", "die Katze schläft im Haus", "ein Mann liest ein Buch"]
ENGLISH = ["the dog runs over the meadow", "the cat sleeps in the house", "a man reads a book"]
RARE_CHINESE = "猫狗鱼"  # in the new run's text, never in the old tokenizer's


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    folder = tmp_path_factory.mktemp("release")
    train_tokenizer((GERMAN + ENGLISH) * 20, folder / "tokenizer.model", vocab_size=300, character_coverage=1.0)
    tokenizer = Tokenizer(folder / "tokenizer.model")
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1)
    cfg = ModelConfig.from_dict({**cfg.to_dict(), "d_ff": 32, "max_positions": 64})
    save_release(folder, Transformer(cfg), {"note": "kept"})
    return folder


@pytest.fixture(scope="module")
def new_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    src = [f"<2en> {g}" for g in GERMAN] + [f"<2zh> {e}" for e in ENGLISH] + ["<2en> 我的猫", "<2en> 猫和狗"]
    tgt = ENGLISH + ["我的猫" + RARE_CHINESE] * 3 + ["my cat", "cat and dog"]
    for split in ("train", "val"):
        (folder / f"{split}.src").write_text("".join(s + "\n" for s in src), encoding="utf-8")
        (folder / f"{split}.tgt").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")
    return folder


def test_missing_characters_are_the_byte_spelt_ones_most_frequent_first(release):
    tokenizer = Tokenizer(release / "tokenizer.model")
    found = missing_characters(tokenizer, ["猫猫猫 狗狗 dog 鱼", "猫"], min_count=2, limit=10)
    assert found == [("猫", 4), ("狗", 2)]  # 鱼 is too rare; the Latin letters and the spaces are known
    assert missing_characters(tokenizer, ["猫猫猫 狗狗"], min_count=1, limit=1) == [("猫", 3)]


def test_extend_model_keeps_old_rows_and_starts_a_character_at_its_bytes(release):
    old, _ = load_release(release)
    tokenizer = Tokenizer(release / "tokenizer.model")
    pieces = [NewPiece("<2zh>", 4), NewPiece("猫", NORMAL)]
    grown = extend_model(old, tokenizer, pieces)
    n = tokenizer.vocab_size
    assert grown.cfg.vocab_size == n + 2
    assert grown.output.weight is grown.src_embed.weight  # still tied
    table = grown.src_embed.weight.detach()
    assert torch.equal(table[:n], old.src_embed.weight.detach())
    assert torch.allclose(table[n + 1], old.src_embed.weight.detach()[byte_piece_ids(tokenizer, "猫")].mean(0))
    assert not table[n].any()  # the symbol's row starts blank
    src = torch.tensor([tokenizer.encode("der Hund") + [2]])
    tgt = torch.tensor([[1] + tokenizer.encode("the dog")])
    with torch.no_grad():
        before, after = old(src, tgt), grown(src, tgt)
    assert torch.allclose(after[..., :n], before, atol=1e-5)  # old text: the old model's scores, two more columns


def test_extend_vocab_command_writes_a_release_a_run_can_start_from(release, new_data, tmp_path, capsys):
    out = tmp_path / "extended"
    code = main(
        [
            "extend-vocab",
            "--model",
            str(release),
            "--data",
            str(new_data),
            "--out",
            str(out),
            "--symbols",
            "<2en>",
            "<2zh>",
            "--min-count",
            "3",
        ]
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    old = Tokenizer(release / "tokenizer.model")
    grown = Tokenizer(out / "tokenizer.model")
    assert report["characters_added"] == 5  # 猫 8 times, 我 的 狗 4, 鱼 3; 和 (once) stays in bytes
    assert grown.vocab_size == old.vocab_size + 2 + report["characters_added"]
    assert report["han_in_bytes_validation"] == {"before": 1.0, "after": pytest.approx(1 / 24)}  # 和 of 24
    for text in ("der Hund läuft", "the cat sleeps"):
        assert grown.encode(text) == old.encode(text)  # every old id keeps its meaning
    ids = grown.encode("<2zh> 我的猫")
    assert "<2zh>" in grown.pieces(ids)
    assert all(not piece.startswith("<0x") for piece in grown.pieces(ids))
    assert grown.decode(grown.encode("我的猫狗鱼")) == "我的猫狗鱼"
    model, meta = load_release(out)
    assert model.cfg.vocab_size == grown.vocab_size
    assert meta["note"] == "kept" and meta["extended"]["vocab_size"] == grown.vocab_size
    with pytest.raises(ValueError, match="already has"):
        main(
            [
                "extend-vocab",
                "--model",
                str(out),
                "--data",
                str(new_data),
                "--out",
                str(tmp_path / "2"),
                "--symbols",
                "<2en>",
            ]
        )
