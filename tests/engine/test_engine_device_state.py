"""Search with I/O binding (engine/device_state.py), the path CUDA engines take, run here on the CPU provider:
it must give the host path's answers exactly, keep the cache and cross keys/values as bound OrtValues, and copy
back only the ranked candidates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from engine.device_state import DeviceDecoderState, device_type, wants_device_search
from engine.search import TopCandidates

COMMITTED = Path(__file__).resolve().parents[2] / "model_repository" / "de-en" / "1"
GERMAN = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau in einem roten Mantel sitzt auf einer Bank und liest ein Buch, während Kinder im Park spielen.",
    "Hallo.",
    "Ein kleines Mädchen klettert in ein Spielhaus aus Holz.",
]


@pytest.fixture(scope="module")
def device_engine(tiny_bundle_dir) -> Engine:
    return Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu", io_binding=True)


def assert_same(host, device):
    for a, b in zip(host, device, strict=True):
        assert (a.text, a.token_ids, a.score) == (b.text, b.token_ids, b.score)
        assert a.hypotheses == b.hypotheses


def test_cpu_engines_search_on_the_host_unless_asked(fp32_engine):
    assert fp32_engine.device_runner is None  # auto: I/O binding only where the sessions run on CUDA
    cuda, cpu = ["CUDAExecutionProvider", "CPUExecutionProvider"], ["CPUExecutionProvider"]
    assert wants_device_search(cuda, fp32_engine.step_decoder)
    assert not wants_device_search(cpu, fp32_engine.step_decoder)
    assert not wants_device_search(cuda, None)  # bundles without a step graph search with decoder.onnx on the host
    assert device_type(["CUDAExecutionProvider", "CPUExecutionProvider"]) == "cuda"
    assert device_type(["CPUExecutionProvider"]) == "cpu"


@pytest.mark.parametrize(
    "options",
    [
        TranslateOptions(),
        TranslateOptions(beam_size=4),
        TranslateOptions(beam_size=3, num_hypotheses=3, length_penalty=1.0),
        TranslateOptions(beam_size=2, max_length=3),  # every sentence stops at its limit
    ],
    ids=["greedy", "beam4", "nbest3", "limit3"],
)
def test_device_search_gives_the_host_answers(fp32_engine, device_engine, sentences, options):
    """Sentences of 1..16 words in one batch: rows finish at different steps, so the cache is reordered on the
    device (gather graph) while finished sources stay as holes; every answer equals the host path's."""
    assert device_engine.device_runner is not None
    assert_same(fp32_engine.translate(sentences, options), device_engine.translate(sentences, options))
    one = sentences[:1]
    assert_same(fp32_engine.translate(one, options), device_engine.translate(one, options))


def test_cache_and_cross_keys_stay_bound_and_only_candidates_come_back(device_engine, sentences):
    runner = device_engine.device_runner
    src = device_engine.source_ids(sentences[:3])
    width = max(len(s) for s in src)
    ids = np.array([s + [0] * (width - len(s)) for s in src], dtype=np.int64)
    sources = runner.encode(ids, ids != 0)
    assert all(isinstance(v, ort.OrtValue) for v in [*sources.cross_keys, *sources.cross_values, sources.src_mask])
    assert sources.cross_keys[0].shape() == [3, runner.heads, width, runner.d_head]
    state = DeviceDecoderState(runner, sources, row_sources=np.repeat(np.arange(3), 2), top_k=4)
    out = state.step(np.ones((6, 1), dtype=np.int64), None)
    assert isinstance(out, TopCandidates) and out.ids.shape == (6, 4)  # never the (rows, vocab) log-probs
    assert len(state.past) == 2 * runner.n_layers and all(isinstance(v, ort.OrtValue) for v in state.past)
    kept = state.past[0].numpy()[[5, 0]]
    state.step(np.ones((2, 1), dtype=np.int64), np.array([5, 0]))  # rows reordered on the device, then one step
    assert state.past[0].shape() == [2, runner.heads, 2, runner.d_head]
    np.testing.assert_array_equal(state.past[0].numpy()[:, :, :1], kept)


@pytest.mark.skipif(not COMMITTED.is_dir(), reason="the trained bundle is not committed")
@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_committed_bundle_device_search_gives_the_host_answers(variant):
    bundle = load_bundle(COMMITTED, verify=False)
    host = Engine(bundle, variant, "cpu")
    device = Engine(bundle, variant, "cpu", io_binding=True)
    for options in (TranslateOptions(), TranslateOptions(beam_size=4, num_hypotheses=2)):
        assert_same(host.translate(GERMAN, options), device.translate(GERMAN, options))
