"""Streamed shards: the writer keeps every pair the in-memory path keeps; the reader gives each rank a disjoint
part, the same order from the same seed, and resumes mid-epoch as if never interrupted."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pytest
import torch
from model_toys import tiny_run

from model.cli import main
from model.data import encode_pairs, read_parallel
from model.shards import MANIFEST, ShardReader, write_shards
from model.train import Trainer, TrainingData, build_optimizer, prepare_tokenizer
from model.transformer import Transformer

SHARD_PAIRS = 70  # 240 toy pairs: shards of 70, 70, 70 and 30


@pytest.fixture(scope="module")
def tokenizer(corpus_dir, tmp_path_factory):
    return prepare_tokenizer(tiny_run(), corpus_dir, tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def shard_dir(corpus_dir, tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "train"
    write_shards(tokenizer, corpus_dir / "train.de", corpus_dir / "train.en", out, 40, SHARD_PAIRS, seed=7)
    return out


def _pairs(examples) -> Counter:
    return Counter((tuple(e.src), tuple(e.tgt)) for e in examples)


def test_shards_hold_the_pairs_the_in_memory_path_keeps(corpus_dir, tokenizer, shard_dir, tmp_path):
    manifest = json.loads((shard_dir / MANIFEST).read_text())
    assert [s["pairs"] for s in manifest["shards"]] == [70, 70, 70, 30]
    assert (manifest["read"], manifest["pairs"], manifest["dropped"]) == (240, 240, 0)
    assert manifest["dtype"] == "uint16" and (shard_dir / "tokenizer.model").read_bytes() == tokenizer.path.read_bytes()
    reader = ShardReader(shard_dir, tokenizer)
    src, tgt = read_parallel(corpus_dir, "train", "de", "en")
    on_disk = [e for s in range(reader.n_shards) for e in reader.examples(s, 0, manifest["shards"][s]["pairs"])]
    assert _pairs(on_disk) == _pairs(encode_pairs(tokenizer, src, tgt, 40))
    for s in range(reader.n_shards):  # each shard sorted by length (the longer side): little padding per batch
        lengths = [(max(x), *x) for x in np.asarray(reader.lengths(s)).tolist()]
        assert lengths == sorted(lengths)

    short = write_shards(tokenizer, corpus_dir / "train.de", corpus_dir / "train.en", tmp_path / "short", 6, 100)
    assert short["pairs"] == len(encode_pairs(tokenizer, src, tgt, 6)) and short["dropped"] == 240 - short["pairs"]
    with pytest.raises(FileExistsError):
        write_shards(tokenizer, corpus_dir / "train.de", corpus_dir / "train.en", tmp_path / "short", 6, 100)


def test_shards_are_checked_against_the_manifest_and_the_tokenizer(shard_dir, tmp_path, corpus_dir):
    copy = shutil.copytree(shard_dir, tmp_path / "copy")
    assert ShardReader(copy).verify() == []
    target = copy / "00001.tgt.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    assert ShardReader(copy).verify() == ["00001.tgt.npy"]
    target.write_bytes(bytes(data[:-2]))
    with pytest.raises(ValueError, match="bytes"):
        ShardReader(copy)
    run = tiny_run()
    run.tokenizer.vocab_size = run.model.vocab_size = 290
    other = prepare_tokenizer(run, corpus_dir, tmp_path / "other")
    with pytest.raises(ValueError, match="another tokenizer"):
        ShardReader(shard_dir, other)
    with pytest.raises(FileNotFoundError, match="model.cli shard"):
        ShardReader(tmp_path)


def _trainer(tokenizer, shard_dir, tmp_path, rank=0, world=1) -> Trainer:
    run = tiny_run()
    model = Transformer(run.model)
    optimizer, scheduler = build_optimizer(run, model)
    data = TrainingData([], [], [], [], train_shards=ShardReader(shard_dir, tokenizer))
    return Trainer(run, tokenizer, data, model, optimizer, scheduler, tmp_path, rank=rank, world=world, progress=False)


@pytest.mark.parametrize("world", [2, 3])
def test_shard_reader_ranks_get_disjoint_parts_that_cover_the_epoch(tokenizer, shard_dir, tmp_path, world):
    source = _trainer(tokenizer, shard_dir, tmp_path).source
    order = list(source.epoch_order(0))
    assert len(order) == source.epoch_size(0) and len(set(order)) == len(order)
    parts = [_trainer(tokenizer, shard_dir, tmp_path, rank, world).epoch_batches(0) for rank in range(world)]
    assert len({len(p) for p in parts}) == 1  # every rank the same number of steps
    taken = [key for part in parts for key in part]
    assert len(set(taken)) == len(taken)  # disjoint
    left_out = [key for key in order if key not in set(taken)]
    assert len(left_out) < world and left_out == order[len(order) - len(left_out) :]  # only the last round's rest
    pairs = sorted((s, i) for s, first, end in taken + left_out for i in range(first, end))
    assert pairs == sorted((s, i) for s, n in enumerate([70, 70, 70, 30]) for i in range(n))  # every pair once


def test_shard_reader_order_follows_the_seed_and_the_epoch(tokenizer, shard_dir, tmp_path):
    source = _trainer(tokenizer, shard_dir, tmp_path).source
    again = ShardReader(shard_dir).batches(source.max_tokens, source.seed)
    assert list(source.epoch_order(0)) == list(again.epoch_order(0))
    assert list(source.epoch_order(0)) != list(source.epoch_order(1))
    other = ShardReader(shard_dir).batches(source.max_tokens, source.seed + 100)
    assert list(source.epoch_order(0)) != list(other.epoch_order(0))
    assert sorted(source.epoch_order(0)) == sorted(source.epoch_order(1))  # the same batches, reordered
    for epoch in (0, 1):
        full = list(source.epoch_order(epoch))
        for start in range(len(full) + 1):
            assert list(source.epoch_order(epoch, start)) == full[start:]
    batch = source.batch(full[0])
    assert batch.src.shape[0] == full[0][2] - full[0][1]
    assert batch.src.numel() <= source.max_tokens and batch.tgt_in.numel() <= source.max_tokens


def test_shards_training_resumes_mid_epoch_like_no_interruption(corpus_dir, tmp_path, capsys):
    """``model.cli shard`` then ``train --shards``: a checkpoint records the reader's position."""
    run_dir = tmp_path / "a"
    prepare_tokenizer(tiny_run(), corpus_dir, run_dir)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_run().to_dict()))
    shards = tmp_path / "shards"
    args = ["--config", str(config), "--data", str(corpus_dir), "--tokenizer", str(run_dir / "tokenizer.model")]
    assert main(["shard", *args, "--out", str(shards), "--shard-pairs", str(SHARD_PAIRS)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {
        "read": 240,
        "pairs": 240,
        "dropped": 0,
        "shards": 4,
    }
    assert main(["shard", "--verify", "--out", str(shards)]) == 0

    n = 3
    first = Trainer.from_run(tiny_run(max_steps=n, shards=str(shards)), corpus_dir, run_dir, progress=False)
    assert first.source.identity.startswith("shards ") and first.train_examples == []
    assert first.total_steps() == n and len(first.epoch_batches(0)) > n + 2
    first.train()
    assert (first.step, first.epoch, first.batch_in_epoch) == (n, 0, n)
    shutil.copytree(run_dir, tmp_path / "b")
    first.cfg.max_steps = n + 2
    first.train()

    resumed = Trainer.from_run(
        tiny_run(max_steps=n + 2, shards=str(shards)), corpus_dir, tmp_path / "b", progress=False
    )
    assert (resumed.step, resumed.batch_in_epoch) == (n, n)
    resumed.train()
    assert (resumed.step, resumed.epoch, resumed.batch_in_epoch) == (first.step, first.epoch, first.batch_in_epoch)
    for a, b in zip(first.model.state_dict().values(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)

    with pytest.raises(ValueError, match="other training data"):  # the position means nothing in memory
        Trainer.from_run(tiny_run(max_steps=n + 3), corpus_dir, tmp_path / "b", progress=False)
