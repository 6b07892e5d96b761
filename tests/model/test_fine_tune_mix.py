"""Training on several corpora: ``model.cli mix`` (oversampling by weight, every split kept per corpus) and a
run that starts from a released model's weights and tokenizer (``train.init_from``)."""

from __future__ import annotations

import shutil

import pytest
import torch
from model_toys import tiny_run

from model.checkpoint import load_release
from model.cli import main
from model.corpus_mix import Corpus
from model.train import Trainer


def _write(folder, prefix, de, en):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{prefix}.de").write_text("".join(s + "\n" for s in de), encoding="utf-8")
    (folder / f"{prefix}.en").write_text("".join(s + "\n" for s in en), encoding="utf-8")


def test_corpus_spec_parses_name_folder_and_weight():
    assert Corpus.parse("m=../data/multi30k:3") == Corpus("m", __import__("pathlib").Path("../data/multi30k"), 3)
    assert Corpus.parse("t=C:/data/t").weight == 1  # a colon that is not a weight stays in the folder
    with pytest.raises(ValueError):
        Corpus.parse("nofolder")
    with pytest.raises(ValueError):
        Corpus.parse("m=x:0")


def test_mix_oversamples_training_and_keeps_each_corpus_split(tmp_path, capsys):
    _write(tmp_path / "a", "train", ["a1", "a2"], ["A1", "A2"])
    _write(tmp_path / "a", "val", ["av"], ["AV"])
    _write(tmp_path / "a", "test_2016_flickr", ["at"], ["AT"])
    _write(tmp_path / "b", "train", ["b1"], ["B1"])
    _write(tmp_path / "b", "val", ["bv"], ["BV"])
    _write(tmp_path / "b", "test", ["bt"], ["BT"])
    out = tmp_path / "mix"
    code = main(
        [
            "mix",
            "--out",
            str(out),
            "--source",
            "de",
            "--target",
            "en",
            "--corpus",
            f"a={tmp_path / 'a'}:2",
            "--corpus",
            f"b={tmp_path / 'b'}",
        ]
    )
    assert code == 0
    assert (out / "train.de").read_text().split() == ["a1", "a2", "a1", "a2", "b1"]
    assert (out / "train.en").read_text().split() == ["A1", "A2", "A1", "A2", "B1"]
    assert (out / "val.de").read_text().split() == ["av", "bv"]  # validation is never oversampled
    assert (out / "a.test_2016_flickr.en").read_text() == "AT\n"
    assert (out / "b.test.de").read_text() == "bt\n"
    assert (out / "b.val.en").read_text() == "BV\n"
    assert '"train": 5' in capsys.readouterr().out


def test_a_run_initialised_from_a_release_starts_from_its_weights_and_tokenizer(corpus_dir, tmp_path):
    base = Trainer.from_run(tiny_run(max_steps=3), corpus_dir, tmp_path / "base", progress=False)
    base.train()
    base.finalize()
    release = tmp_path / "base" / "release"
    released, _ = load_release(release)

    run = tiny_run(max_steps=4)
    run.train.init_from = str(release)
    tuned = Trainer.from_run(run, corpus_dir, tmp_path / "tuned", progress=False)
    assert (tmp_path / "tuned" / "tokenizer.model").read_bytes() == (release / "tokenizer.model").read_bytes()
    for name, value in released.state_dict().items():
        assert torch.equal(tuned.model.state_dict()[name], value), name
    assert tuned.step == 0
    tuned.train()
    changed = [n for n, v in released.state_dict().items() if not torch.equal(tuned.model.state_dict()[n], v)]
    assert changed, "fine-tuning did not move any weight"

    # Resuming the fine-tune continues from its own checkpoint, not from the release again.
    shutil.copytree(tmp_path / "tuned", tmp_path / "again")
    resumed = Trainer.from_run(run, corpus_dir, tmp_path / "again", progress=False)
    assert resumed.step == 4
    for name, value in tuned.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name


def test_init_from_a_model_of_another_shape_is_refused(corpus_dir, tmp_path):
    base = Trainer.from_run(tiny_run(max_steps=1), corpus_dir, tmp_path / "base", progress=False)
    base.train()
    base.finalize()
    run = tiny_run(max_steps=1)
    run.model.d_ff *= 2
    run.train.init_from = str(tmp_path / "base" / "release")
    with pytest.raises(ValueError, match="model config differs"):
        Trainer.from_run(run, corpus_dir, tmp_path / "other", progress=False)


def test_init_from_accepts_other_dropout_rates(corpus_dir, tmp_path):
    """Dropout is training's regularisation, not the weights' shape: a fine-tuning run may change it."""
    base = Trainer.from_run(tiny_run(max_steps=1), corpus_dir, tmp_path / "base", progress=False)
    base.train()
    base.finalize()
    run = tiny_run(max_steps=1)
    run.model.activation_dropout, run.model.dropout = 0.0, 0.2
    run.train.init_from = str(tmp_path / "base" / "release")
    tuned = Trainer.from_run(run, corpus_dir, tmp_path / "tuned", progress=False)
    released, _ = load_release(tmp_path / "base" / "release")
    for name, value in released.state_dict().items():
        assert torch.equal(tuned.model.state_dict()[name], value), name
