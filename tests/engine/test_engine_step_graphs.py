"""A bundle's two step graphs (core/graphs.py STEP_GRAPHS): the exporter writes both over the same weights, whole-batch
search runs the interface-3 graph and the live decode (continuous batching) the batch-invariant interface-4 one, both
paths give the same translations, and a bundle of one step graph serves both paths with it, as before."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from tiny_bundle import SAMPLE_SENTENCES

from core.bundle import MANIFEST, load_bundle, write_manifest
from core.graphs import BATCH_STEP, LIVE_STEP, STEP_INTERFACE, step_interface
from engine import Engine
from engine.decoding import TranslateOptions
from engine.live import LiveBatch
from export.pack import storage

TEXTS = [*SAMPLE_SENTENCES, "der hund spielt im park", "ein mann und eine frau sitzen"]


def _interface(session) -> int:
    return step_interface(session.get_modelmeta().custom_metadata_map)


class _Counting:
    """A session wrapper that counts ``run`` calls."""

    def __init__(self, session) -> None:
        self.session, self.runs = session, 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return self.session.run(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.session, name)


def _live(engine: Engine, texts: list[str], options: TranslateOptions) -> list:
    """The texts decoded together by the live decode, all joining at the first step."""
    live = LiveBatch(engine)
    done, _ = live.add([(i, ids, options, False) for i, ids in enumerate(engine.source_ids(texts))])
    results = dict(done)
    while len(live):
        results.update(live.step().finished)
    return [results[i] for i in range(len(texts))]


@pytest.fixture(scope="module", params=["fp32", "int8"])
def engine(request, tiny_bundle_dir) -> Engine:
    return Engine(load_bundle(tiny_bundle_dir), variant=request.param, providers="cpu")


def test_the_exported_bundle_has_both_step_graphs_over_the_same_weights(tiny_bundle_dir):
    bundle = load_bundle(tiny_bundle_dir)
    manifest = bundle.manifest
    for variant in ("fp32", "int8"):
        entry = manifest["variants"][variant]
        for key, interface in ((LIVE_STEP, STEP_INTERFACE), (BATCH_STEP, 3)):
            assert entry[key] == f"graphs/{variant}.{key}.onnx" and entry[key] in manifest["files"]
            model = onnx.load(str(bundle.graph(variant, key)), load_external_data=False)
            assert step_interface({p.key: p.value for p in model.metadata_props}) == interface, (variant, key)
        # no weights file of its own: the second graph reads the regions the first one reads
        own = [] if variant == "fp32" else [f"{variant}.weights"]
        assert [p.name for p in bundle.weights(variant)] == ["fp32.weights", *own]
    assert BATCH_STEP in manifest["graphs"]
    assert storage(bundle.path, manifest)["duplicates"] == []


def test_int8_step_graphs_are_quantized_with_the_same_scales(tiny_bundle_dir):
    """One calibration for both graphs: every activation scale of one is a scale of the other (the interface-4 graph
    rounds the same projections' inputs; export/calibration.py calibrated_as). Each graph's ranges come from its own
    fp32 run of the same feeds, whose attention sums may differ in the last bit (they did on an AVX2-only machine:
    0.0205287170 against 0.0205287188): equal within float32 rounding."""
    bundle = load_bundle(tiny_bundle_dir)
    scales = []
    for key in (BATCH_STEP, LIVE_STEP):
        model = onnx.load(str(bundle.graph("int8", key)))
        values = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
        quantize = [n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[1] in values]
        scales.append(sorted(float(values[n.input[1]]) for n in quantize if values[n.input[1]].size == 1))
    assert scales[0] and len(scales[0]) == len(scales[1])
    assert scales[0] == pytest.approx(scales[1], rel=1e-6)


def test_whole_batch_search_runs_the_interface_3_graph_and_the_live_decode_interface_4(engine):
    assert engine.step_graphs == {"batch": BATCH_STEP, "live": LIVE_STEP}
    assert _interface(engine.step_decoder) == 3 and _interface(engine.live_step) == STEP_INTERFACE
    batch, live = _Counting(engine.step_decoder), _Counting(engine.live_step)
    engine.step_decoder, engine.live_step = batch, live
    try:
        engine.translate(TEXTS[:3], TranslateOptions(beam_size=2))
        assert batch.runs > 0 and live.runs == 0
        ran = batch.runs
        _live(engine, TEXTS[:3], TranslateOptions(beam_size=2))
        assert live.runs > 0 and batch.runs == ran
    finally:
        engine.step_decoder, engine.live_step = batch.session, live.session


@pytest.mark.parametrize("beam", [1, 4])
def test_both_paths_give_the_same_translations(engine, beam):
    """Greedy and beam 4, each sentence's tokens and n-best identical, scores equal within float noise (the two
    graphs order some sums differently)."""
    options = TranslateOptions(beam_size=beam, num_hypotheses=beam)
    whole = engine.translate(TEXTS, options)
    for got, want in zip(_live(engine, TEXTS, options), whole, strict=True):
        assert got.token_ids == want.token_ids and got.text == want.text
        assert [h[2] for h in got.hypotheses] == [h[2] for h in want.hypotheses]
        assert got.score == pytest.approx(want.score, abs=1e-4)


def test_a_bundle_of_one_step_graph_serves_both_paths_with_it(tiny_bundle_dir, tmp_path):
    """A bundle exported before the two graphs (decoder_step alone, interface 4 here; the committed ones have
    interface 3): whole-batch search and the live decode share its one session."""
    old = tmp_path / "1"
    shutil.copytree(tiny_bundle_dir, old)
    manifest = json.loads((old / MANIFEST).read_text())
    for entry in manifest["variants"].values():
        (old / entry.pop(BATCH_STEP)).unlink()
    manifest["graphs"].pop(BATCH_STEP)
    manifest["files"] = [f for f in manifest["files"] if BATCH_STEP not in f]
    write_manifest(old, manifest)
    engine = Engine(load_bundle(old), variant="fp32", providers="cpu")
    assert engine.live_step is engine.step_decoder and _interface(engine.step_decoder) == STEP_INTERFACE
    assert engine.step_graphs == {"batch": LIVE_STEP, "live": LIVE_STEP}
    both = Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu")
    got, want = _live(engine, TEXTS, TranslateOptions()), both.translate(TEXTS)
    assert [t.token_ids for t in got] == [t.token_ids for t in want]
    np.testing.assert_allclose([t.score for t in got], [t.score for t in want], atol=1e-4)
