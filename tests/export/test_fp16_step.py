"""The fp16 decoder_step graph converted from fp32 (export.quantize.convert_fp16_step, what the GPU check serves as
fp16): it loads and runs on the CPU provider, and on the committed de-en bundle it translates as the fp32 graph
does (measured on all of test_2016_flickr: 998/1000 identical, BLEU 39.37 / 40.27 vs 39.37 / 40.28 greedy / beam 4)."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest

from bench.gpu_check import fp16_step_bundle
from core.bundle import load_bundle
from core.graphs import step_interface
from engine import Engine
from engine.decoding import TranslateOptions

COMMITTED = Path(__file__).resolve().parents[2] / "model_repository" / "de-en" / "1"
GERMAN = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau sitzt auf einer Bank.",
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
    "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt ein Fenster.",
    "Eine Gruppe von Menschen steht vor einem Iglu.",
    "Ein Junge springt von einem Felsen in das Wasser eines Sees.",
    "Zwei Männer spielen Fußball auf einem grünen Rasen.",
]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    if not COMMITTED.is_dir():
        pytest.skip("the trained bundle is not committed")
    bundle = load_bundle(COMMITTED, verify=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the converter warns about every weight it clamps to fp16's range
        fp16 = fp16_step_bundle(bundle, tmp_path_factory.mktemp("fp16"))
    return Engine(bundle, "fp32", "cpu"), Engine(fp16, "fp16", "cpu", io_binding=True), fp16


def test_converted_graph_is_fp16_inside_with_fp32_inputs_and_outputs(engines):
    fp32, engine, bundle = engines
    path = bundle.graph("fp16", "decoder_step")
    assert path.is_file() and not str(path).startswith(str(COMMITTED))
    model = onnx.load(str(path))
    assert {i.type.tensor_type.elem_type for i in model.graph.input if i.name.startswith("past_")} == {1}
    weights = [t.data_type for t in model.graph.initializer]
    assert weights.count(onnx.TensorProto.FLOAT16) > weights.count(onnx.TensorProto.FLOAT)
    # the fused attention computes in fp16: its queries do not come through a Cast back to float32 (a blocked op's)
    to_float = {n.output[0] for n in model.graph.node if n.op_type == "Cast" and n.attribute[0].i == 1}
    attention = [n for n in model.graph.node if n.op_type == "MultiHeadAttention"]
    assert attention and not any(n.input[0] in to_float for n in attention)
    interface = step_interface(engine.step_decoder.get_modelmeta().custom_metadata_map)
    assert interface == step_interface(fp32.step_decoder.get_modelmeta().custom_metadata_map)  # the committed one's
    assert engine.device_runner is not None


@pytest.mark.parametrize("beam_size", [1, 4])
def test_fp16_step_translates_as_fp32(engines, beam_size):
    fp32, fp16, _ = engines
    options = TranslateOptions(beam_size=beam_size)
    a, b = fp32.translate(GERMAN, options), fp16.translate(GERMAN, options)
    same = sum(x.token_ids == y.token_ids for x, y in zip(a, b, strict=True))
    assert same >= len(GERMAN) - 1, [(x.text, y.text) for x, y in zip(a, b, strict=True)]
    assert max(abs(x.score - y.score) for x, y in zip(a, b, strict=True) if x.token_ids == y.token_ids) < 0.05


def test_a_step_graph_of_the_current_interface_converts_and_decodes_live_as_alone(tiny_bundle_dir, tmp_path):
    """The tiny bundle's step graph (the current interface: each row's new key/value written at its own column)
    converts to fp16 with its attention in fp16, translates as fp32 does, and decodes live as alone."""
    from tiny_bundle import SAMPLE_SENTENCES

    from core.graphs import STEP_INTERFACE
    from engine.live import LiveBatch

    bundle = load_bundle(tiny_bundle_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp16 = fp16_step_bundle(bundle, tmp_path)
    model = onnx.load(str(fp16.graph("fp16", "decoder_step")))
    to_float = {n.output[0] for n in model.graph.node if n.op_type == "Cast" and n.attribute[0].i == 1}
    attention = [n for n in model.graph.node if n.op_type == "MultiHeadAttention"]
    assert attention and not any(n.input[0] in to_float for n in attention)
    fp32, engine = Engine(bundle, "fp32", "cpu"), Engine(fp16, "fp16", "cpu")
    assert step_interface(engine.live_step.get_modelmeta().custom_metadata_map) == STEP_INTERFACE
    assert engine.step_graphs == {"batch": "decoder_step_batch", "live": "decoder_step"}  # both converted
    options = [TranslateOptions(beam_size=1 + i % 3) for i in range(len(SAMPLE_SENTENCES))]
    alone = [engine.translate([t], o)[0] for t, o in zip(SAMPLE_SENTENCES, options, strict=True)]
    pairs = list(zip(SAMPLE_SENTENCES, options, strict=True))
    assert [a.token_ids for a in alone] == [fp32.translate([t], o)[0].token_ids for t, o in pairs]
    live, results = LiveBatch(engine), {}
    live.add([(i, engine.source_ids([t])[0], options[i], False) for i, t in enumerate(SAMPLE_SENTENCES)])
    while len(live):
        results.update(live.step().finished)
    assert [results[i].token_ids for i in range(len(SAMPLE_SENTENCES))] == [a.token_ids for a in alone]
