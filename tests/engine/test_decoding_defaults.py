"""A bundle's decoding defaults (manifest "decoding", written by ``python -m export.cli decoding``): options a caller
leaves None take them (``Engine.resolved``), an explicit value wins, and the command reseals the manifest."""

from __future__ import annotations

import json

import pytest
from bundle_copies import copy_bundle
from tiny_bundle import SAMPLE_SENTENCES

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from export.cli import main as export_cli


@pytest.fixture(scope="module")
def blocking_bundle(tiny_bundle_dir, tmp_path_factory):
    """The tiny bundle with a default block of repeated subwords (size 1: the strongest, visible on any output)."""
    target = tmp_path_factory.mktemp("decoding") / "de-en" / "1"
    copy_bundle(tiny_bundle_dir, target)
    assert export_cli(["decoding", "--bundle", str(target), "--no-repeat-ngram-size", "1", "--why", "a test"]) == 0
    return target


def test_the_command_writes_and_reseals(blocking_bundle):
    bundle = load_bundle(blocking_bundle)  # verifies every hash, the manifest's own included
    assert bundle.manifest["decoding"] == {"no_repeat_ngram_size": 1}
    assert bundle.manifest["decoding_reason"] == "a test"
    with pytest.raises(SystemExit):
        export_cli(["decoding", "--bundle", str(blocking_bundle), "--no-repeat-ngram-size", "33"])


@pytest.mark.parametrize("beam", [1, 4])
def test_left_out_options_take_the_bundle_default(blocking_bundle, tiny_bundle_dir, beam):
    engine = Engine(load_bundle(blocking_bundle), providers="cpu")
    plain_engine = Engine(load_bundle(tiny_bundle_dir), providers="cpu")
    assert engine.decoding == {"no_repeat_ngram_size": 1} and plain_engine.decoding == {"no_repeat_ngram_size": 0}
    assert engine.resolved(TranslateOptions(beam_size=beam)).no_repeat_ngram_size == 1
    assert engine.resolved(TranslateOptions(beam_size=beam, no_repeat_ngram_size=0)).no_repeat_ngram_size == 0
    default = engine.translate(SAMPLE_SENTENCES, TranslateOptions(beam_size=beam))
    explicit = engine.translate(SAMPLE_SENTENCES, TranslateOptions(beam_size=beam, no_repeat_ngram_size=1))
    off = engine.translate(SAMPLE_SENTENCES, TranslateOptions(beam_size=beam, no_repeat_ngram_size=0))
    plain = plain_engine.translate(SAMPLE_SENTENCES, TranslateOptions(beam_size=beam))
    assert [t.token_ids for t in default] == [t.token_ids for t in explicit]
    assert [t.token_ids for t in off] == [t.token_ids for t in plain]
    for t in default:
        assert len(t.token_ids) == len(set(t.token_ids)), t.token_ids
    assert any(len(t.token_ids) != len(set(t.token_ids)) for t in plain)  # the block is seen on this model


def test_evaluate_with_another_block_does_not_seal(blocking_bundle, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "val.de").write_text("\n".join(SAMPLE_SENTENCES[:4]) + "\n")
    (data / "val.en").write_text("\n".join(["a man ."] * 4) + "\n")
    before = (blocking_bundle / "manifest.json").read_text()
    report = tmp_path / "report.json"
    args = ["evaluate", "--bundle", str(blocking_bundle), "--data", str(data), "--split", "val", "--beam", "1"]
    assert export_cli([*args, "--variants", "fp32", "--no-repeat-ngram-size", "0", "--report", str(report)]) == 0
    assert (blocking_bundle / "manifest.json").read_text() == before  # measured with another block: not sealed
    assert json.loads(report.read_text())["fp32"]["val"]["beam1"]["no_repeat_ngram_size"] == 0
