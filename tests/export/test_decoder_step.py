"""The lean decoder_step graph: parity with PyTorch for every architecture it covers, same translations as
decoder.onnx, present in new bundles (fp32 and int8), and engines fall back to decoder.onnx without it.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from export_variants import ARCHITECTURES, random_model, random_shapes, tiny_random_config, write_bundle
from tiny_bundle import SAMPLE_SENTENCES

from core.bundle import load_bundle
from core.graphs import STEP_INTERFACE, STEP_INTERFACE_KEY, step_input_names, step_interface, step_output_names
from core.tokenizer import Tokenizer
from engine import Engine
from engine.decoding import TranslateOptions
from export.decoder_step import build_decoder_step, supports_decoder_step
from export.parity import ragged_step_max_diff, step_max_diff
from model.checkpoint import load_release

TOLERANCE = 1e-4
STEP_OUTPUTS = {"step.log_probs", "step.top_log_probs", "step.present_keys", "step.present_values"}


def _session(model, interface: int = STEP_INTERFACE) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    proto = build_decoder_step(model, interface).SerializeToString()
    return ort.InferenceSession(proto, options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def tiny(tiny_model_dir, tiny_bundle_dir):
    model, _ = load_release(tiny_model_dir / "release")
    return model, load_bundle(tiny_bundle_dir)


LEAN_ARCHITECTURES = sorted(
    name
    for name, o in ARCHITECTURES.items()
    if o.get("positional_encoding") not in ("relative", "xl_relative") and o.get("attention", "vanilla") == "vanilla"
)


@pytest.mark.parametrize("name", LEAN_ARCHITECTURES)
def test_step_graph_matches_pytorch_for_every_covered_architecture(name, tiny_bundle_dir):
    vocab = Tokenizer(tiny_bundle_dir / "tokenizer.model").vocab_size
    model = random_model(tiny_random_config(vocab, **ARCHITECTURES[name]), seed=5)
    shapes = random_shapes(8, model.cfg.max_positions, seed=3) + [(2, 3, 1, model.cfg.max_positions - 1)]
    worst = step_max_diff(model, _session(model), shapes)
    assert set(worst) == STEP_OUTPUTS
    assert max(worst.values()) <= TOLERANCE, worst


def test_tiny_bundle_step_graph_matches_pytorch_and_its_parity_check_can_fail(tiny):
    model, bundle = tiny
    session = ort.InferenceSession(str(bundle.graph("fp32", "decoder_step")), providers=["CPUExecutionProvider"])
    shapes = random_shapes(8, model.cfg.max_positions, seed=4)
    assert max(step_max_diff(model, session, shapes).values()) <= TOLERANCE
    other = random_model(model.cfg, seed=99)
    assert step_max_diff(other, session, [(2, 5, 1, 3)])["step.log_probs"] > 1e-2


def test_step_graph_interface(tiny):
    model, bundle = tiny
    proto = onnx.load(str(bundle.graph("fp32", "decoder_step")))
    n = model.cfg.n_decoder_layers
    assert [i.name for i in proto.graph.input] == step_input_names(n)
    assert [o.name for o in proto.graph.output] == step_output_names(n)
    assert {node.op_type for node in proto.graph.node} >= {"MultiHeadAttention", "TopK", "LogSoftmax"}
    caches = {name for name in step_input_names(n) if name.startswith("past_")}
    readers = [node.op_type for node in proto.graph.node if caches & set(node.input)]
    assert readers == ["Pad"] * 2 * n  # each cache gets its zero column, then each row's new entry (ScatterND)
    writers = {node.op_type for node in proto.graph.node if set(node.output) & {f"present_keys_{i}" for i in range(n)}}
    assert writers == {"ScatterND"}  # one d_head slice per index, not ScatterElements' index per element
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert metadata[STEP_INTERFACE_KEY] == str(STEP_INTERFACE)
    assert step_interface(metadata) == STEP_INTERFACE == 4
    ragged = ["positions", "self_mask", "query_rows", "row_slots"]
    assert step_input_names(n)[:7] == ["tokens", "src_mask", "top_k", *ragged]
    assert step_input_names(n, interface=2)[:4] == ["tokens", "src_mask", "top_k", "cross_keys_0"]


def test_interface_versions_compare_as_integers():
    """Version 10 is newer than version 2 (a string comparison would say older)."""
    assert step_interface({STEP_INTERFACE_KEY: "10"}) > step_interface({STEP_INTERFACE_KEY: "2"})
    assert step_interface({}) == 1  # graphs of the first interface carry no entry


@pytest.mark.parametrize(
    "overrides",
    [
        {"positional_encoding": "relative"},
        {"positional_encoding": "xl_relative"},
        {"attention": "sparse"},
        {"attention": "linear"},
    ],
)
def test_relative_positions_and_attention_variants_have_no_step_graph(tiny_bundle_dir, overrides):
    vocab = Tokenizer(tiny_bundle_dir / "tokenizer.model").vocab_size
    model = random_model(tiny_random_config(vocab, **overrides))
    assert not supports_decoder_step(model)
    with pytest.raises(ValueError, match="vanilla attention with absolute positions only"):
        build_decoder_step(model)


def test_new_bundles_list_the_step_graph_for_fp32_and_int8(tiny):
    _, bundle = tiny
    manifest = json.loads((bundle.path / "manifest.json").read_text())
    for variant in ("fp32", "int8"):
        assert manifest["variants"][variant]["decoder_step"] == f"graphs/{variant}.decoder_step.onnx"
        assert f"graphs/{variant}.decoder_step.onnx" in manifest["files"]
    assert [i["name"] for i in manifest["graphs"]["decoder_step"]["inputs"]][:2] == ["tokens", "src_mask"]
    assert Engine(bundle, variant="int8", providers="cpu").step_decoder is not None


@pytest.mark.parametrize("beam_size", [1, 4])
def test_lean_and_full_decoder_give_the_same_translations(tiny, beam_size):
    """fp32 only: int8 graphs are quantized separately (fused Q|K|V shares one scale), so they may differ."""
    _, bundle = tiny
    lean = Engine(bundle, variant="fp32", providers="cpu")
    full = Engine(bundle, variant="fp32", providers="cpu", lean_decoder=False)
    assert lean.step_decoder is not None and full.step_decoder is None
    options = TranslateOptions(beam_size=beam_size, num_hypotheses=beam_size)
    texts = SAMPLE_SENTENCES * 3  # batch of 15, sentences finishing at different steps
    for a, b in zip(lean.translate(texts, options), full.translate(texts, options), strict=True):
        assert a.token_ids == b.token_ids
        assert [h[2] for h in a.hypotheses] == [h[2] for h in b.hypotheses]
        assert np.isclose(a.score, b.score, atol=1e-3)


def test_bundle_without_step_graph_falls_back_to_decoder(tiny, tmp_path):
    model, bundle = tiny
    out = write_bundle(model, bundle.tokenizer_file, tmp_path / "1")  # encoder + decoder only
    engine = Engine(load_bundle(out), variant="fp32", providers="cpu")
    assert engine.step_decoder is None
    reference = Engine(bundle, variant="fp32", providers="cpu")
    for beam in (1, 4):
        options = TranslateOptions(beam_size=beam)
        got = [t.token_ids for t in engine.translate(SAMPLE_SENTENCES, options)]
        assert got == [t.token_ids for t in reference.translate(SAMPLE_SENTENCES, options)]


@pytest.mark.parametrize("interface", [3, 4])
@pytest.mark.parametrize("name", LEAN_ARCHITECTURES)
def test_ragged_step_rows_at_different_positions_match_pytorch_alone(name, interface, tiny_bundle_dir):
    """Rows at their own positions over a padded cache (interface 4: right padded, 3: left padded), sources with
    0, 1, 2 or 3 rows."""
    vocab = Tokenizer(tiny_bundle_dir / "tokenizer.model").vocab_size
    model = random_model(tiny_random_config(vocab, **ARCHITECTURES[name]), seed=5)
    session = _session(model, interface)
    for seed in range(3):
        worst = ragged_step_max_diff(model, session, seed)
        assert max(worst.values()) <= TOLERANCE, worst


def test_tiny_bundle_ragged_step_matches_pytorch(tiny):
    model, bundle = tiny
    session = ort.InferenceSession(str(bundle.graph("fp32", "decoder_step")), providers=["CPUExecutionProvider"])
    assert max(ragged_step_max_diff(model, session, seed=7).values()) <= TOLERANCE


@pytest.mark.parametrize("interface", [1, 2])
def test_step_graphs_of_older_interfaces_are_served_in_whole_batches(tiny, tmp_path, interface):
    """Bundles exported before interface 3 keep loading: interface 2 takes cross keys/values per source and one
    position for all rows, interface 1 (no metadata entry) per row. The engine serves them with its whole-batch
    search (same translations) and offers no live batch (continuous batching) for them."""
    from engine.live import LiveBatch, supports_live

    model, bundle = tiny
    proto = build_decoder_step(model, interface=2)
    if interface == 1:
        del proto.metadata_props[:]  # no interface entry = version 1 (a graph fed per row is valid for version 2)
    assert step_interface({p.key: p.value for p in proto.metadata_props}) == interface
    assert [i.name for i in proto.graph.input] == step_input_names(model.cfg.n_decoder_layers, interface=2)
    path = tmp_path / f"decoder_step_v{interface}.onnx"
    onnx.save(proto, str(path))
    current = Engine(bundle, variant="fp32", providers="cpu")
    legacy = Engine(bundle, variant="fp32", providers="cpu")
    # a bundle of that one step graph: whole-batch search and the live decode both run it
    legacy.step_decoder = legacy.live_step = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert supports_live(current) and not supports_live(legacy)
    with pytest.raises(ValueError, match="interface 3"):
        LiveBatch(legacy)
    for beam in (1, 4):
        options = TranslateOptions(beam_size=beam)
        got = [t.token_ids for t in legacy.translate(SAMPLE_SENTENCES * 2, options)]
        assert got == [t.token_ids for t in current.translate(SAMPLE_SENTENCES * 2, options)]


def test_step_graphs_of_interface_3_still_decode_live_over_a_left_padded_cache(tiny, tmp_path):
    """Bundles exported before interface 4 (the committed ones among them) keep continuous batching: their graph
    appends each new key/value after a left-padded cache, which the live decode then keeps. A sentence joining a
    running batch gets its alone answer (within float rounding: that layout is not bit-exact, issue 36)."""
    from engine.live import LiveBatch

    model, bundle = tiny
    path = tmp_path / "decoder_step_v3.onnx"
    onnx.save(build_decoder_step(model, interface=3), str(path))
    legacy = Engine(bundle, variant="fp32", providers="cpu")
    # a bundle of that one step graph: whole-batch search and the live decode both run it
    legacy.step_decoder = legacy.live_step = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    live = LiveBatch(legacy)
    assert not live.right
    options = [TranslateOptions(), TranslateOptions(beam_size=4), TranslateOptions(beam_size=2, num_hypotheses=2)]
    items = [(i, legacy.source_ids([t])[0], options[i % 3], False) for i, t in enumerate(SAMPLE_SENTENCES)]
    live.add(items[:2])
    results: dict = {}
    for step in range(200):
        if step == 3:
            live.add(items[2:])
        results.update(live.step().finished)
        if step > 3 and not len(live):
            break
    for i, text in enumerate(SAMPLE_SENTENCES):
        alone = legacy.translate([text], options[i % 3])[0]
        assert results[i].token_ids == alone.token_ids
        assert results[i].score == pytest.approx(alone.score, abs=1e-5)


def test_decoder_graph_loads_only_when_attention_needs_it(tiny):
    _, bundle = tiny
    engine = Engine(bundle, variant="int8", providers="cpu")
    engine.translate(SAMPLE_SENTENCES, TranslateOptions(beam_size=4))
    assert engine._decoder is None  # search ran on decoder_step alone
    result = engine.attention(SAMPLE_SENTENCES[0])
    assert engine._decoder is not None and result["cross"].shape[-1] == len(result["source_tokens"])


def test_beams_wider_than_the_graphs_top_k_rank_in_numpy(tiny):
    """A step graph's two-stage top-k serves at most mtserve.max_top_k candidates (32 for the tiny vocabulary);
    a wider beam (17 -> 34 candidates) falls back to ranking the full log_probs, with the same result."""
    _, bundle = tiny
    lean = Engine(bundle, variant="fp32", providers="cpu")
    assert int(lean.step_decoder.get_modelmeta().custom_metadata_map["mtserve.max_top_k"]) == 32
    full = Engine(bundle, variant="fp32", providers="cpu", lean_decoder=False)
    options = TranslateOptions(beam_size=17)
    got = [t.token_ids for t in lean.translate(SAMPLE_SENTENCES, options)]
    assert got == [t.token_ids for t in full.translate(SAMPLE_SENTENCES, options)]
