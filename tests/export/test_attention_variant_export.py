"""Each attention variant, trained on the tiny corpus and exported through ``export.cli export``: its graphs match
PyTorch within 1e-4 and the engine's greedy and beam translations of the test split are PyTorch's, token for token."""

from __future__ import annotations

import pytest
from export_variants import random_shapes
from tiny_bundle import write_corpus

from core.bundle import load_bundle
from core.graphs import LINEAR_STATE, LINEAR_STATE_INPUTS, decoder_cache
from engine import Engine
from export.parity import graph_max_diff, translation_parity
from model.checkpoint import load_release
from model.data import read_parallel
from model.evaluate import bleu

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def trained(attention_variant_dir):
    model, _ = load_release(attention_variant_dir / "release")
    bundle = load_bundle(attention_variant_dir / "repository" / "de-en" / "1")
    return model, Engine(bundle, variant="fp32", providers="cpu")


@pytest.fixture(scope="module")
def test_split(tmp_path_factory):
    corpus = write_corpus(tmp_path_factory.mktemp("corpus"))  # the corpus the bundles were trained on (seeded)
    sources, references = read_parallel(corpus, "test", "de", "en")
    return sources, references


def test_graphs_match_pytorch(trained):
    model, engine = trained
    worst = graph_max_diff(model, engine, random_shapes(8, model.cfg.max_positions, seed=7))
    assert len(worst) == 9  # 4 encoder + 5 decoder outputs, caches or running states included
    assert max(worst.values()) <= TOLERANCE, worst


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translations_of_the_test_split_are_pytorchs(trained, test_split, beam_size):
    model, engine = trained
    sources, references = test_split
    parity = translation_parity(model, engine, sources, beam_size)
    assert parity.total == len(sources) == 30
    assert parity.identical == parity.total, f"beam {beam_size}: sentences {parity.differing} differ"
    if beam_size == 1:  # a trained model: it translates the toy corpus, so the parity is not of noise
        # BLEU after 1,500 steps on an AVX-512 EPYC: sparse 82, linear 96, xl_relative 67 (random weights about 0)
        hyps = [t.text for t in engine.translate(sources)]
        assert bleu(hyps, references)["bleu"] >= 40, hyps[:5]


def test_the_bundle_declares_its_cache_and_searches_with_decoder_onnx(trained):
    model, engine = trained
    assert engine.step_decoder is None  # the lean step graph is vanilla attention only
    assert engine.config["attention"] == model.cfg.attention
    names = [i.name for i in engine.decoder.get_inputs()]
    if model.cfg.attention == "linear":
        assert names == LINEAR_STATE_INPUTS and decoder_cache(names) == LINEAR_STATE
    else:
        assert "past_keys" in names and decoder_cache(names) == "kv"
