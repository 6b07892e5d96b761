"""PyTorch vs onnxruntime parity of the exported graphs, for the tiny trained bundle and every architecture variant.

Max |ORT fp32 - PyTorch| over random shapes (batch 1..16, source 1..100, cache 0..50) must stay within 1e-4
on log-probabilities, attention probabilities, encoder states and key/value caches.
"""

from __future__ import annotations

import dataclasses

import pytest
from export_variants import ARCHITECTURES, random_model, random_shapes, tiny_random_config, write_bundle
from tiny_bundle import SAMPLE_SENTENCES

from core.bundle import load_bundle
from core.graphs import ENCODER_OUTPUTS, decoder_cache, decoder_outputs
from core.tokenizer import Tokenizer
from engine import Engine
from export.parity import graph_max_diff, translation_parity
from model.checkpoint import load_release
from model.config import ACTIVATIONS, ATTENTIONS, NORM_PLACEMENTS, POSITIONAL_ENCODINGS, ModelConfig

TOLERANCE = 1e-4


def every_output(engine: Engine) -> set[str]:
    """The outputs of both graphs (decoder.onnx's depend on its cache kind, core/graphs.py)."""
    cache = decoder_cache([i.name for i in engine.decoder.get_inputs()])
    return set(ENCODER_OUTPUTS) | {f"decoder.{name}" for name in decoder_outputs(cache)}


@pytest.fixture(scope="module", params=sorted(ARCHITECTURES))
def variant(request, tiny_bundle_dir, tmp_path_factory):
    """(name, PyTorch model, engine on its exported fp32 graphs) for one architecture variant."""
    tokenizer_file = tiny_bundle_dir / "tokenizer.model"
    cfg = tiny_random_config(Tokenizer(tokenizer_file).vocab_size, **ARCHITECTURES[request.param])
    model = random_model(cfg, seed=list(ARCHITECTURES).index(request.param))  # in order of addition: seeds stay
    out = write_bundle(model, tokenizer_file, tmp_path_factory.mktemp(request.param) / "1", name=request.param)
    return request.param, model, Engine(load_bundle(out), variant="fp32", providers="cpu")


@pytest.fixture(scope="module")
def tiny_pair(tiny_model_dir, tiny_bundle_dir):
    model, _ = load_release(tiny_model_dir / "release")
    return model, Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu")


def _assert_within(worst: dict[str, float], engine: Engine) -> None:
    assert set(worst) == every_output(engine)  # every graph output was compared
    too_far = {name: diff for name, diff in worst.items() if not diff <= TOLERANCE}
    assert not too_far, f"ORT vs PyTorch max abs diff above {TOLERANCE}: {too_far}"


def test_architectures_cover_every_config_option(tiny_bundle_dir):
    tiny = load_bundle(tiny_bundle_dir).model_config
    configs = [ModelConfig.from_dict(tiny)] + [dataclasses.replace(ModelConfig(), **o) for o in ARCHITECTURES.values()]
    assert {c.positional_encoding for c in configs} == set(POSITIONAL_ENCODINGS)
    assert {c.attention for c in configs} == set(ATTENTIONS)
    assert {c.norm_placement for c in configs} == set(NORM_PLACEMENTS)
    assert {c.activation for c in configs} == set(ACTIVATIONS)
    assert {c.tie_embeddings for c in configs} == {True, False}
    assert any(c.n_decoder_layers > 1 for c in configs) and any(c.n_encoder_layers > 1 for c in configs)


def test_random_shapes_cover_the_asked_ranges():
    shapes = random_shapes(14, max_positions=160)
    batches, sources, targets, pasts = zip(*shapes, strict=True)
    assert min(batches) == 1 and max(batches) == 16
    assert min(sources) == 1 and max(sources) == 100
    assert min(pasts) == 0 and max(pasts) == 50
    assert max(targets) > 1  # several new tokens at once (teacher forcing) besides single steps


def test_tiny_bundle_graphs_match_pytorch(tiny_pair):
    model, engine = tiny_pair
    _assert_within(graph_max_diff(model, engine, random_shapes(10, model.cfg.max_positions, seed=1)), engine)


def test_variant_graphs_match_pytorch(variant):
    name, model, engine = variant
    assert engine.config == model.cfg.to_dict()  # the manifest carries the config the graphs came from
    _assert_within(graph_max_diff(model, engine, random_shapes(10, model.cfg.max_positions, seed=2)), engine)


def test_graph_max_diff_notices_a_different_model(variant, tiny_bundle_dir):
    """The parity measure itself can fail: other weights behind the same graphs give large differences."""
    name, model, engine = variant
    other = random_model(model.cfg, seed=99)
    worst = graph_max_diff(other, engine, [(2, 5, 1, 3)])
    assert worst["decoder.log_probs"] > 1e-2 and worst["encoder_output"] > 1e-2


@pytest.mark.parametrize("beam_size", [1, 4])
def test_variant_translations_match_pytorch(variant, beam_size):
    """Random weights rarely emit EOS, so every sentence runs to its length limit through the KV cache."""
    name, model, engine = variant
    parity = translation_parity(model, engine, SAMPLE_SENTENCES, beam_size)
    assert parity.total == len(SAMPLE_SENTENCES)
    assert parity.identical == parity.total, f"{name} beam {beam_size}: sentences {parity.differing} differ"
