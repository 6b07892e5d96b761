"""Execution provider choice: what is asked, and what the session really runs on."""

from __future__ import annotations

import logging

import numpy as np
import onnxruntime as ort
import pytest

from core.bundle import load_bundle
from engine import Engine, runtime
from engine.decoding import TranslateOptions
from engine.runtime import ProviderError, create_session, requested_providers

CUDA_AVAILABLE = "CUDAExecutionProvider" in ort.get_available_providers()
NOT_AVAILABLE = "ignore:Specified provider 'CUDAExecutionProvider' is not in available provider names"


@pytest.fixture(scope="module")
def encoder_path(tiny_bundle_dir):
    return load_bundle(tiny_bundle_dir).graph("fp32", "encoder")


def test_cpu_runs_on_the_cpu_provider(encoder_path, tiny_bundle_dir):
    assert create_session(encoder_path, "cpu").get_providers() == ["CPUExecutionProvider"]
    engine = Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu")
    assert engine.providers == ["CPUExecutionProvider"]
    assert engine.decoder.get_providers() == ["CPUExecutionProvider"]


def test_auto_reports_what_the_session_runs_on(encoder_path, tiny_bundle_dir):
    session = create_session(encoder_path, "auto")
    engine = Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="auto")
    assert engine.providers == engine.encoder.get_providers() == session.get_providers()
    assert engine.providers[-1] == "CPUExecutionProvider"
    if not CUDA_AVAILABLE:
        assert engine.providers == ["CPUExecutionProvider"]


@pytest.mark.skipif(CUDA_AVAILABLE, reason="this onnxruntime offers CUDA")
def test_cuda_without_cuda_raises(tiny_bundle_dir):
    with pytest.raises(ProviderError, match="CUDA"):
        requested_providers("cuda")
    with pytest.raises(ProviderError, match="CUDA"):
        Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cuda")


@pytest.mark.filterwarnings(NOT_AVAILABLE)
def test_cuda_that_silently_falls_back_to_cpu_raises(encoder_path, monkeypatch):
    """onnxruntime-gpu on a machine where CUDA cannot start lists CUDA, then runs on CPU: 'cuda' must refuse."""
    if CUDA_AVAILABLE:
        pytest.skip("a CUDA build: the fallback is simulated on CPU-only builds")
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert requested_providers("cuda") == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    with pytest.raises(ProviderError, match="runs on"):
        create_session(encoder_path, "cuda")


@pytest.mark.filterwarnings(NOT_AVAILABLE)
def test_auto_that_falls_back_to_cpu_warns_and_runs(encoder_path, monkeypatch, caplog):
    if CUDA_AVAILABLE:
        pytest.skip("a CUDA build: the fallback is simulated on CPU-only builds")
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    with caplog.at_level(logging.WARNING, logger=runtime.__name__):
        session = create_session(encoder_path, "auto")
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert any("did not initialise" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("choice", ["gpu", "CPU", "", "tensorrt"])
def test_an_invalid_choice_raises(encoder_path, choice):
    with pytest.raises(ProviderError, match="provider must be one of"):
        create_session(encoder_path, choice)


def test_thread_settings_reach_the_session(encoder_path):
    session = create_session(encoder_path, "cpu", intra_op_threads=1, inter_op_threads=1)
    options = session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)


def _uses_shared_arena(session) -> bool:
    try:
        return session.get_session_options().get_session_config_entry(runtime.USE_ENV_ALLOCATORS) == "1"
    except RuntimeError:  # onnxruntime raises for a key that was never set
        return False


def test_cpu_sessions_share_the_process_arena_unless_told_not_to(encoder_path, tiny_bundle_dir):
    assert _uses_shared_arena(create_session(encoder_path, "cpu"))
    assert not _uses_shared_arena(create_session(encoder_path, "cpu", shared_arena=False))
    shared = Engine(load_bundle(tiny_bundle_dir), variant="int8", providers="cpu")
    own = Engine(load_bundle(tiny_bundle_dir), variant="int8", providers="cpu", shared_arena=False)
    assert all(_uses_shared_arena(s) for s in (shared.encoder, shared.step_decoder, shared.decoder))
    assert not any(_uses_shared_arena(s) for s in (own.encoder, own.step_decoder, own.decoder))
    # the allocator changes where tensors live, never what is computed; two engines on one arena interleave
    texts = ["ein kleiner test", "noch ein satz mit mehr wörtern", ""]
    for options in (TranslateOptions(), TranslateOptions(beam_size=3, num_hypotheses=2)):
        a, b = shared.translate(texts, options), own.translate(texts, options)
        assert [(t.token_ids, t.score, t.hypotheses) for t in a] == [(t.token_ids, t.score, t.hypotheses) for t in b]
    assert np.array_equal(shared.embed(texts[:2]), own.embed(texts[:2]))


def test_memory_pattern_and_prepacking_are_onnxruntimes_defaults_unless_turned_off(encoder_path, tiny_bundle_dir):
    """The A/B knobs of docs/engine-speed-log.md item 31 reach the session, and change no answer."""
    default = create_session(encoder_path, "cpu").get_session_options()
    assert default.enable_mem_pattern
    with pytest.raises(RuntimeError):  # never set: onnxruntime prepacks
        default.get_session_config_entry("session.disable_prepacking")
    off = create_session(encoder_path, "cpu", memory_pattern=False, prepack=False).get_session_options()
    assert not off.enable_mem_pattern and off.get_session_config_entry("session.disable_prepacking") == "1"
    bundle = load_bundle(tiny_bundle_dir)
    usual = Engine(bundle, variant="int8", providers="cpu")
    plain = Engine(bundle, variant="int8", providers="cpu", memory_pattern=False, prepack=False)
    texts = ["ein kleiner test", "noch ein satz mit mehr wörtern"]
    for options in (TranslateOptions(), TranslateOptions(beam_size=3)):
        a, b = usual.translate(texts, options), plain.translate(texts, options)
        assert [t.token_ids for t in a] == [t.token_ids for t in b]  # scores: equal here; kernels may round apart
        assert [t.score for t in a] == pytest.approx([t.score for t in b], rel=1e-5)


def test_variant_choice_follows_the_provider():
    """auto: the bundle's default on CPU (int8 when statically quantized); on CUDA fp16 if present, else fp32,
    never the CPU-oriented int8; an explicit MT_VARIANT wins; an unknown one is refused by name."""
    from types import SimpleNamespace

    from core.bundle import BundleError
    from service.models.registry import choose_variant

    def bundle(variants, default):
        return SimpleNamespace(variants=variants, default_variant=default, path="b")

    cpu, cuda = ["CPUExecutionProvider"], ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert choose_variant(bundle(["fp32", "int8"], "int8"), "auto", cpu) == "int8"
    assert choose_variant(bundle(["fp32", "int8"], "int8"), "auto", cuda) == "fp32"
    assert choose_variant(bundle(["fp32", "int8", "fp16"], "int8"), "auto", cuda) == "fp16"
    assert choose_variant(bundle(["fp32", "int8", "fp16"], "int8"), "fp32", cuda) == "fp32"
    with pytest.raises(BundleError, match="MT_VARIANT=fp16"):
        choose_variant(bundle(["fp32", "int8"], "int8"), "fp16", cpu)
