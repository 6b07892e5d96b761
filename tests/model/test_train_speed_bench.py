"""bench/train_speed.py drives the Trainer's own step for every thread count and autocast, and bf16 autocast
trains: the forward pass runs in bfloat16 while the weights stay float32."""

from __future__ import annotations

import json

import torch
from model_toys import tiny_run

from bench.train_speed import main as train_speed
from model.data import Batch
from model.train import Trainer


def test_train_speed_prints_a_row_per_variant(corpus_dir, tmp_path, capsys):
    trainer = Trainer.from_run(tiny_run(), corpus_dir, tmp_path / "run", progress=False)  # trains the tokenizer
    config = tmp_path / "run.json"
    config.write_text(json.dumps(trainer.run.to_dict()))
    code = train_speed(
        ["--config", str(config), "--data", str(corpus_dir), "--tokenizer", str(tmp_path / "run" / "tokenizer.model"),
         "--threads", "1", "--autocast", "none", "bf16", "--warmup", "1", "--steps", "2", "--repeats", "1",
         "--variant", "activation_dropout=0.0,dropout=0.2", "--loss", "projected", "logits"]
    )  # fmt: skip
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if " | 1 | " in line]
    assert code == 0 and len(rows) == 8
    assert rows[0].startswith("| config | projected | 1 | fp32 |")
    assert rows[1].startswith("| config | projected | 1 | bf16 |")
    assert rows[2].startswith("| config | logits | 1 | fp32 |")
    assert rows[4].startswith("| activation_dropout=0.0,dropout=0.2 | projected | 1 | fp32 |")
    assert rows[0].endswith("| 1.00x |")


def test_a_variant_changes_only_the_named_model_settings():
    import pytest

    from bench.train_speed import _variant

    run = tiny_run()
    changed = _variant(run, "activation_dropout=0.0,dropout=0.2")
    assert (changed.model.activation_dropout, changed.model.dropout) == (0.0, 0.2)
    assert changed.model.d_model == run.model.d_model and run.model.activation_dropout is None  # a copy
    with pytest.raises(SystemExit, match="not KEY=VALUE"):
        _variant(run, "no_such_setting=1")


def test_bf16_autocast_steps_change_float32_weights(corpus_dir, tmp_path):
    trainer = Trainer.from_run(tiny_run(autocast="bf16"), corpus_dir, tmp_path / "run", progress=False)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    batch = Batch.from_examples(trainer.train_examples[:8])
    losses = [trainer.train_step(batch) for _ in range(3)]
    after = trainer.model.state_dict()
    assert all(v.dtype == torch.float32 for v in after.values())
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(loss == loss and loss < 20 for loss in losses)  # finite


def test_an_unknown_autocast_is_refused(tmp_path):
    import pytest

    from model.config import RunConfig

    (tmp_path / "run.json").write_text(json.dumps({"train": {"autocast": "fp8"}}))
    with pytest.raises(ValueError, match="autocast"):
        RunConfig.load(tmp_path / "run.json")


def test_auto_autocast_follows_the_cpu_flags(corpus_dir, tmp_path, monkeypatch):
    import model.precision as precision

    assert precision.cpu_has_bf16("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert precision.cpu_has_bf16("flags\t\t: fpu avx2 amx_bf16 amx_tile\n")
    assert not precision.cpu_has_bf16("flags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert not precision.cpu_has_bf16("")
    for has, expected in ((True, torch.bfloat16), (False, None)):
        monkeypatch.setattr(precision, "cpu_has_bf16", lambda has=has: has)
        trainer = Trainer.from_run(tiny_run(autocast="auto"), corpus_dir, tmp_path / f"r{has}", progress=False)
        assert trainer.autocast_dtype is expected
    plain = Trainer.from_run(tiny_run(autocast=""), corpus_dir, tmp_path / "plain", progress=False)
    assert plain.autocast_dtype is None and not plain.scaler.is_enabled()


def test_train_memory_measures_in_memory_and_streamed_data(corpus_dir, tmp_path, capsys, monkeypatch):
    import subprocess
    import types

    import bench.train_memory as train_memory

    trainer = Trainer.from_run(tiny_run(), corpus_dir, tmp_path / "run", progress=False)  # trains the tokenizer
    config = tmp_path / "run.json"
    config.write_text(json.dumps(trainer.run.to_dict()))
    tokenizer, shards = tmp_path / "run" / "tokenizer.model", tmp_path / "shards"
    args = ["--config", str(config), "--data", str(corpus_dir), "--tokenizer", str(tokenizer), "--shards", str(shards)]

    def in_process(cmd, **kwargs):  # each way in this process, not a fresh one: the figures are not the point here
        way = cmd[cmd.index("--way") + 1]
        result = train_memory.measure(way, str(config), str(corpus_dir), str(tokenizer), str(shards), 100)
        return types.SimpleNamespace(stdout=json.dumps(result) + "\n")

    monkeypatch.setattr(subprocess, "run", in_process)
    assert train_memory.main(args) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "pairs" not in line]
    assert [row.split(" | ")[0] for row in rows] == [
        "| shard writer",
        "| in memory (load_data)",
        "| streamed shards, one epoch",
    ]
    assert all(" | 240 | " in row for row in rows)
    batches = [int(row.split(" | ")[2].replace(",", "")) for row in rows[1:]]
    assert batches[0] > 0 and batches[1] > 0  # an epoch's batches either way (shards batch within a shard: more)
