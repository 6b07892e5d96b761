"""The command line end to end on a tiny corpus: train (checkpoints, pruning, finalize), then translate."""

from __future__ import annotations

import json

import torch
from model_toys import tiny_run

from model.checkpoint import TOKENIZER_FILE, load_release
from model.cli import main
from model.config import RunConfig


def test_config_json_round_trip(tmp_path):
    run = tiny_run()
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run.to_dict()))
    assert RunConfig.load(path) == run


def test_cli_train_then_translate(corpus_dir, tmp_path, capsys):
    run = tiny_run(eval_every=2, keep_checkpoints=2)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(run.to_dict()))
    out = tmp_path / "run"
    argv = ["train", "--config", str(config), "--data", str(corpus_dir), "--out", str(out), "--no-progress"]
    assert main([*argv, "--max-steps", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")  # the summary is printed last, indented
    summary = json.loads("\n".join(lines[start:]))

    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [2, 4, 6]
    assert all(r["valid_nll"] > 0 and 0 <= r["valid_bleu"] <= 100 for r in log)
    assert sorted(p.name for p in (out / "checkpoints").glob("step*.pt")) == ["step0000004.pt", "step0000006.pt"]

    release = out / "release"
    model, meta = load_release(release)
    assert (release / TOKENIZER_FILE).read_bytes() == (out / TOKENIZER_FILE).read_bytes()
    assert not (release / "prepare.json").exists()  # the corpus was not made by model.cli prepare
    assert meta["training"] == summary
    assert summary["chosen"] in ("best", "averaged") and summary["steps"] == 6
    assert summary["parameters"] == model.num_parameters()
    run.train.max_steps = 6
    assert meta["run"] == json.loads(json.dumps(run.to_dict()))
    chosen, _ = load_release(out / summary["chosen"])
    for a, b in zip(model.state_dict().values(), chosen.state_dict().values(), strict=True):
        assert torch.equal(a, b)

    assert main(["translate", "--model", str(release), "--beam", "2", "der hund", "ein mann spielt"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_val_limit_and_evaluate_limit_make_a_smoke_run_cheap(corpus_dir, tmp_path, capsys, monkeypatch):
    """--val-limit N decodes N validation sentences per validation; evaluate --limit N scores N sentences."""
    import model.train as train_module

    decoded: list[int] = []
    real = train_module.evaluate

    def counting(model, tokenizer, sources, *args, **kwargs):
        decoded.append(len(sources))
        return real(model, tokenizer, sources, *args, **kwargs)

    monkeypatch.setattr(train_module, "evaluate", counting)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_run(eval_every=3, keep_checkpoints=2).to_dict()))
    out = tmp_path / "run"
    argv = ["train", "--config", str(config), "--data", str(corpus_dir), "--out", str(out), "--no-progress"]
    assert main([*argv, "--max-steps", "6", "--val-limit", "3"]) == 0
    assert decoded and set(decoded) == {3}  # every validation and the final choice: 3 sentences each
    capsys.readouterr()
    split = next(p.stem for p in corpus_dir.glob("*.de") if not p.stem.startswith("train"))
    result = tmp_path / "eval.json"
    args = ["evaluate", "--model", str(out / "release"), "--data", str(corpus_dir), "--split", split]
    assert main([*args, "--beam", "1", "--limit", "4", "--output", str(result)]) == 0
    assert json.loads(result.read_text())["results"]["beam1"]["n_sentences"] == 4


def test_bleu_report_has_chrf_with_its_signature():
    from model.evaluate import bleu

    result = bleu(["a man rides a bike", "two dogs play"], ["a man rides a bicycle", "two dogs are playing"])
    assert 0 < result["chrf"] < 100 and result["signature_chrf"].startswith("nrefs:1")
    assert bleu(["same text here"], ["same text here"])["chrf"] == 100.0


def test_the_release_carries_the_corpus_preparation_record(corpus_dir, tmp_path, capsys):
    import shutil

    data = shutil.copytree(corpus_dir, tmp_path / "data")
    (data / "prepare.json").write_text(json.dumps({"rules": {"normalization": "1"}}))
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_run(eval_every=2).to_dict()))
    out = tmp_path / "run"
    argv = ["train", "--config", str(config), "--data", str(data), "--out", str(out), "--no-progress"]
    assert main([*argv, "--max-steps", "2"]) == 0
    assert json.loads((out / "release" / "prepare.json").read_text()) == {"rules": {"normalization": "1"}}
