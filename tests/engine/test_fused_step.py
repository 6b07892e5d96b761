"""The fused decoder step (native/fused_step/, engine/fused_step_graph.py, engine/fused_step.py): the operator
built from source, run by onnxruntime, against the int8 step graph it replaces.

The bundle: the tiny model trained pre-norm (the layout the operator computes) and exported in int8, with a shortlist.
The operator's products are exact integer sums and its float parts follow onnxruntime's, but not bit for bit (the
softmax's exponentials, dot-product order): a quantized activation on a rounding edge may round the other way, so
outputs are compared within tolerances, and translations for agreement.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from exact_int8 import exact_int8_model
from tiny_bundle import cached_tiny_bundle, write_corpus

from core.bundle import load_bundle
from core.cpu import cpu_flags
from core.graphs import SEARCH_LOOP_OUTPUTS, VOCAB_SOURCES, has_vocab_sources, step_input_names
from engine import Engine
from engine.decoding import TranslateOptions
from engine.fused_step import LIBRARY_ENV, auto_blocker, fused_step_session
from engine.fused_step_graph import NotFused, fused_loop_graph, fused_search_graph, fused_step_graph
from engine.runtime import create_session
from engine.search_loop import SearchLoop

ROOT = Path(__file__).resolve().parents[2]
SENTENCES = [
    "ein hund läuft im park .",
    "zwei kinder spielen mit einem ball .",
    "eine frau liest ein buch .",
    "der mann trinkt kaffee .",
    "die katze schläft auf dem sofa .",
    "ein junge fährt fahrrad .",
]


def _build(folder: Path, name: str) -> Path:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler (scripts/install-test-tools.sh installs gcc)")
    out = folder / name
    subprocess.run(["bash", str(ROOT / "native" / "build.sh"), str(out)], check=True, capture_output=True)
    return out


# the kinds MT_FUSED_STEP_KERNEL forces (int8_products.h): the plain loops, AVX-512 VNNI without AMX tiles, and the
# kernels of CPUs without AVX-512 (AVX2's vpmaddwd, AVX-VNNI's 256-bit vpdpbusd)
FORCED_KERNELS = ("plain", "vnni", "avx2", "avxvnni")
# what mtserve_fused_kernel() answers for each kernel (int8_products.h's enum)
KERNEL_NUMBERS = {"plain": 0, "vnni": 1, "avx2": 2, "avxvnni": 3}


def _cpu_lacks(kernel: str) -> str | None:
    """Why ``kernel`` cannot run on this CPU (a skip reason), or None."""
    needs = {"avx2": {"avx2", "fma"}, "avxvnni": {"avx2", "fma", "avx_vnni"}}.get(kernel, set())
    missing = needs - cpu_flags()
    return f"this CPU has no {', '.join(sorted(missing))}" if missing else None


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """The operator's library, built from this checkout's source by native/build.sh (as `make native` does)."""
    return _build(tmp_path_factory.mktemp("native"), "libmtserve_fused_step.so")


@pytest.fixture(scope="module")
def forced_libraries(tmp_path_factory) -> dict[str, Path]:
    """Copies of the library for MT_FUSED_STEP_KERNEL=plain / vnni / avx2 / avxvnni: each copy reads the variable once,
    when its first kernel is created, so each kind gets a file of its own."""
    folder = tmp_path_factory.mktemp("native-forced")
    return {kind: _build(folder, f"libmtserve_fused_step_{kind}.so") for kind in FORCED_KERNELS}


@pytest.fixture(scope="module")
def pre_norm_bundle(request, tmp_path_factory) -> Path:
    """The tiny bundle trained pre-norm, fp32 + int8, with a shortlist learned from its corpus."""
    from export.cli import main as export_main

    cache_root = Path(request.config.cache.mkdir("mtserve"))
    target = tmp_path_factory.mktemp("pre-norm")
    cached_tiny_bundle(cache_root, target, model_overrides={"norm_placement": "pre"}, int8=True)
    bundle = target / "repository" / "de-en" / "1"
    corpus = write_corpus(target / "corpus")
    assert export_main(["shortlist", "--bundle", str(bundle), "--data", str(corpus), "--frequent", "8"]) == 0
    return bundle


@pytest.fixture
def use_library(library, monkeypatch):
    monkeypatch.setenv(LIBRARY_ENV, str(library))
    return library


def _sessions(bundle_dir: Path, library: Path):
    bundle = load_bundle(bundle_dir)
    path = bundle.graph("int8", "decoder_step_batch")
    graph = create_session(path, "cpu")
    fused = create_session(path, "cpu", model=fused_step_graph(path), custom_ops=library)
    return bundle, graph, fused


def _step_feeds(bundle, rng, rows_per_source=(2, 1, 3), past=5, src=7, vocab_ids=None):
    """Inputs of a ragged step: sources with different row counts and source lengths, rows with masked cache
    columns (left padding), rows not ordered by source."""
    cfg = bundle.model_config
    layers, heads, d = cfg["n_decoder_layers"], cfg["n_heads"], cfg["d_model"]
    dh = d // heads
    sources = len(rows_per_source)
    group = max(rows_per_source)
    row_source = np.concatenate([np.full(n, s) for s, n in enumerate(rows_per_source)])
    order = rng.permutation(len(row_source))
    row_source = row_source[order]
    rows = len(row_source)
    query_rows = np.zeros((sources, group), dtype=np.int64)
    row_slots = np.zeros(rows, dtype=np.int64)
    for s in range(sources):
        mine = np.flatnonzero(row_source == s)
        query_rows[s] = np.resize(mine, group)
        for j, r in enumerate(mine):
            row_slots[r] = s * group + j
    src_mask = np.ones((sources, src), dtype=bool)
    src_mask[1, 4:] = False  # a shorter source
    self_mask = np.ones((rows, past + 1), dtype=bool)
    self_mask[0, :2] = False  # a younger row
    feeds = {
        "tokens": rng.integers(4, cfg["vocab_size"], size=(rows, 1)).astype(np.int64),
        "src_mask": src_mask,
        "top_k": np.array([4], dtype=np.int64),
        "positions": (self_mask.sum(1, keepdims=True) - 1).astype(np.int64),
        "self_mask": self_mask,
        "query_rows": query_rows,
        "row_slots": row_slots,
    }
    for i in range(layers):
        feeds[f"cross_keys_{i}"] = rng.normal(0, 1, (sources, heads, src, dh)).astype(np.float32)
        feeds[f"cross_values_{i}"] = rng.normal(0, 1, (sources, heads, src, dh)).astype(np.float32)
        feeds[f"past_keys_{i}"] = rng.normal(0, 1, (rows, heads, past, dh)).astype(np.float32)
        feeds[f"past_values_{i}"] = rng.normal(0, 1, (rows, heads, past, dh)).astype(np.float32)
    feeds["vocab_ids"] = np.array([] if vocab_ids is None else vocab_ids, dtype=np.int64)
    assert list(feeds) == step_input_names(layers, 3) + ["vocab_ids"]
    return feeds


def _kernel_library(kernel: str, library: Path, forced_libraries: dict[str, Path], monkeypatch) -> Path:
    """The library whose products run on ``kernel``: the CPU's own choice (default), the plain loops, forced on every
    CPU, or the AVX2 / AVX-VNNI kernels of CPUs without AVX-512, forced where the CPU has them."""
    if _cpu_lacks(kernel):
        pytest.skip(_cpu_lacks(kernel))
    monkeypatch.setenv("MT_FUSED_STEP_KERNEL", "" if kernel == "default" else kernel)
    return library if kernel == "default" else forced_libraries[kernel]


@pytest.mark.parametrize("kernel", ["default", "plain", "avx2", "avxvnni"])
@pytest.mark.parametrize("subset", [False, True], ids=["whole-vocabulary", "subset"])
def test_fused_step_computes_the_step_graph(pre_norm_bundle, library, forced_libraries, monkeypatch, subset, kernel):
    """Against the step graph with its int8 products computed exactly (exact_int8.py): onnxruntime's own u8 x s8
    kernels saturate on CPUs without VNNI, so the graph as onnxruntime runs it there is no reference."""
    lib = _kernel_library(kernel, library, forced_libraries, monkeypatch)
    bundle, graph, fused = _sessions(pre_norm_bundle, lib)
    path = bundle.graph("int8", "decoder_step_batch")
    exact = create_session(path, "cpu", model=exact_int8_model(path))
    # the CPU's own word (cpuid, as onnxruntime's MLAS asks it, not /proc/cpuinfo, which an emulator leaves as the
    # host's): the library's default kernel is VNNI
    vnni = kernel == "default" and ctypes.CDLL(str(lib)).mtserve_fused_kernel() == 1
    rng = np.random.default_rng(7)
    vocab = bundle.model_config["vocab_size"]
    ids = np.sort(rng.choice(np.arange(4, vocab), 40, replace=False)) if subset else None
    names = [o.name for o in graph.get_outputs()]
    assert names == [o.name for o in fused.get_outputs()] == [o.name for o in exact.get_outputs()]
    for _ in range(3):
        feeds = _step_feeds(bundle, rng, vocab_ids=ids)
        want = dict(zip(names, exact.run(None, feeds), strict=True))
        got = dict(zip(names, fused.run(None, feeds), strict=True))
        for name in names:
            assert got[name].shape == want[name].shape, name
            assert got[name].dtype == want[name].dtype, name
        layers = bundle.model_config["n_decoder_layers"]
        for i in range(layers):  # the cache: the past as given, the new column appended
            for kind in ("keys", "values"):
                present, past = got[f"present_{kind}_{i}"], feeds[f"past_{kind}_{i}"]
                np.testing.assert_array_equal(present[:, :, :-1], past)
                np.testing.assert_allclose(present, want[f"present_{kind}_{i}"], atol=0.05)
        # log-probabilities within the quantization's rounding, and normalised
        np.testing.assert_allclose(got["log_probs"], want["log_probs"], atol=0.1)
        np.testing.assert_allclose(np.exp(got["log_probs"]).sum(1), 1.0, rtol=1e-4)
        # the top candidates: the best k of the operator's own log-probabilities, in vocabulary ids
        k = int(feeds["top_k"][0])
        columns = np.argsort(-got["log_probs"], axis=1, kind="stable")[:, :k]
        expected_ids = ids[columns] if subset else columns
        np.testing.assert_array_equal(got["top_ids"], expected_ids)
        np.testing.assert_array_equal(got["top_log_probs"], np.take_along_axis(got["log_probs"], columns, 1))
        assert (got["top_ids"][:, 0] == want["top_ids"][:, 0]).mean() >= 0.8
        if vnni:  # onnxruntime's u8 x s8 kernels are exact here too: the graph itself agrees
            graph_out = dict(zip(names, graph.run(None, feeds), strict=True))
            np.testing.assert_allclose(graph_out["log_probs"], want["log_probs"], atol=0.1)


def test_the_exact_reference_computes_the_int8_products_exactly(tmp_path):
    """exact_int8.py's rewrite of one MatMulIntegerToFloat against numpy's integer sums, with activations over the whole
    u8 range and weights over the whole s8 range (the pairs that saturate in onnxruntime's AVX2 kernel): the
    reference the fused operator is tested against is itself right on every CPU."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(3)
    k, n, rows = 256, 48, 5
    w = rng.integers(-127, 128, size=(k, n)).astype(np.int8)
    weights = {
        "w": w,
        "x_scale": np.array(0.05, np.float32),
        "w_scale": rng.uniform(0.001, 0.02, n).astype(np.float32),
        "x_zero": np.array(131, np.uint8),
        "w_zero": np.zeros(n, np.int8),
        "bias": rng.normal(0, 1, n).astype(np.float32),
    }
    node = helper.make_node("MatMulIntegerToFloat", ["x", *weights], ["y"], domain="com.microsoft")
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, [rows, k])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [rows, n])],
        [numpy_helper.from_array(v, name) for name, v in weights.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    file = tmp_path / "one-product.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(file))
    x = rng.integers(0, 256, size=(rows, k)).astype(np.uint8)
    (got,) = create_session(file, "cpu", model=exact_int8_model(file)).run(None, {"x": x})
    sums = (x.astype(np.int64) - 131) @ w.astype(np.int64)
    want = sums * (weights["x_scale"] * weights["w_scale"]).astype(np.float64) + weights["bias"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-4)
    with pytest.raises(ValueError, match="no MatMulIntegerToFloat"):
        onnx.save(helper.make_model(helper.make_graph([], "empty", [], []), opset_imports=opsets), str(file))
        exact_int8_model(file)


@pytest.mark.parametrize("rows_per_source", [(4, 4, 4), (4, 4, 2), (3, 2, 2), (1, 1)])
def test_every_kernel_computes_the_same_step(pre_norm_bundle, library, forced_libraries, monkeypatch, rows_per_source):
    """The plain loops (CPUs without AVX-512 VNNI), VNNI and, where granted, AMX tiles (from 8 rows): the integer
    products are exact, so VNNI and AMX agree bit for bit; the plain path's float sums run in another order. The row
    counts take every tile of the AVX2 kernel (sixes, a four, single rows) and of AVX-VNNI (fours, single rows): 12
    (AMX tiles where the CPU has them), 10, 7 and 2 (one by one, as greedy search of one sentence)."""
    bundle = load_bundle(pre_norm_bundle)
    path = bundle.graph("int8", "decoder_step_batch")
    rng = np.random.default_rng(11)
    feeds = _step_feeds(bundle, rng, rows_per_source=rows_per_source)
    outputs = {}
    for kind, lib in [("default", library), *forced_libraries.items()]:
        monkeypatch.setenv("MT_FUSED_STEP_KERNEL", "" if kind == "default" else kind)
        session = create_session(path, "cpu", model=fused_step_graph(path), custom_ops=lib)
        outputs[kind] = session.run(None, feeds)
    for got, want in zip(outputs["vnni"], outputs["default"], strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(outputs["plain"], outputs["default"], strict=True):
        np.testing.assert_allclose(got, want, atol=0.1)
    # AVX2 and AVX-VNNI: the same exact integer sums and the same 8-lane float code, so the same bits; against the
    # 16-lane AVX-512 code only the float sums' order differs
    narrow = [kind for kind in ("avx2", "avxvnni") if not _cpu_lacks(kind)]
    for kind in narrow:
        for got, want in zip(outputs[kind], outputs["default"], strict=True):
            np.testing.assert_allclose(got, want, atol=1e-3)
    if len(narrow) == 2:
        for got, want in zip(outputs["avxvnni"], outputs["avx2"], strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel", FORCED_KERNELS)
def test_the_forced_kernel_is_the_one_that_runs(forced_libraries, kernel, monkeypatch):
    """MT_FUSED_STEP_KERNEL picks the kernel where the CPU has it (asked by cpuid, as the library does)."""
    if kernel != "plain" and _cpu_lacks(kernel):
        pytest.skip(_cpu_lacks(kernel))
    if kernel == "vnni" and "avx512_vnni" not in cpu_flags():
        pytest.skip("this CPU has no AVX-512 VNNI")
    monkeypatch.setenv("MT_FUSED_STEP_KERNEL", kernel)
    assert ctypes.CDLL(str(forced_libraries[kernel])).mtserve_fused_kernel() == KERNEL_NUMBERS[kernel]


def test_a_change_in_the_input_changes_the_output(pre_norm_bundle, library):
    bundle, _, fused = _sessions(pre_norm_bundle, library)
    rng = np.random.default_rng(1)
    feeds = _step_feeds(bundle, rng)
    first = fused.run(["log_probs"], feeds)[0]
    feeds["tokens"] = (feeds["tokens"] + 1) % bundle.model_config["vocab_size"]
    assert not np.allclose(fused.run(["log_probs"], feeds)[0], first)


def test_bad_inputs_are_refused_and_the_session_still_works(pre_norm_bundle, library):
    bundle, _, fused = _sessions(pre_norm_bundle, library)
    rng = np.random.default_rng(2)
    feeds = _step_feeds(bundle, rng)
    good = fused.run(["log_probs"], feeds)[0]
    for name, value in [
        ("tokens", np.full_like(feeds["tokens"], 10**6)),
        ("positions", np.full_like(feeds["positions"], -1)),
        ("row_slots", np.full_like(feeds["row_slots"], 999)),
        ("vocab_ids", np.array([5, 10**7], dtype=np.int64)),
    ]:
        with pytest.raises(Exception, match="FusedDecoderStep"):
            fused.run(["log_probs"], {**feeds, name: value})
    np.testing.assert_array_equal(fused.run(["log_probs"], feeds)[0], good)


def test_concurrent_runs_with_different_subsets_get_their_own_answers(pre_norm_bundle, library):
    """Runs share the kernel and its cached subset packing: each must still see its own subset."""
    bundle, _, fused = _sessions(pre_norm_bundle, library)
    rng = np.random.default_rng(3)
    vocab = bundle.model_config["vocab_size"]
    cases = []
    for _ in range(4):
        ids = np.sort(rng.choice(np.arange(4, vocab), 30 + len(cases) * 7, replace=False))
        feeds = _step_feeds(bundle, rng, vocab_ids=ids)
        cases.append((feeds, fused.run(None, feeds)))
    failures = []

    def hammer(feeds, want):
        for _ in range(25):
            got = fused.run(None, feeds)
            if not all(np.array_equal(a, b) for a, b in zip(got, want, strict=True)):
                failures.append(1)

    threads = [threading.Thread(target=hammer, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def _exact_graphs(monkeypatch) -> None:
    """Engines built from now on open their int8 decoder graphs with exact products (exact_int8.py); the fused
    step's own sessions (fused_step.py) and the encoder, which both engines share, are left as they are (the
    encoder's integer products are batch-invariant; fp32 sgemm's blocking is not)."""
    import engine.engine as engine_module

    real = engine_module.create_session

    def exact(path, *args, **kwargs):
        if kwargs.get("model") is None and not Path(path).name.endswith("encoder.onnx"):
            with contextlib.suppress(ValueError):  # no int8 product in this graph (fp32, the gather graph)
                kwargs["model"] = exact_int8_model(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(engine_module, "create_session", exact)


@pytest.mark.parametrize("kernel", ["default", "plain", "avx2"])
def test_engine_translations_agree_with_the_step_graph(pre_norm_bundle, library, forced_libraries, monkeypatch, kernel):
    """The engine on the fused step against the engine on the step graph, both with exact int8 products elsewhere
    (the encoder): on CPUs without VNNI onnxruntime's own products saturate (exact_int8.py)."""
    monkeypatch.setenv(LIBRARY_ENV, str(_kernel_library(kernel, library, forced_libraries, monkeypatch)))
    _exact_graphs(monkeypatch)
    bundle = load_bundle(pre_norm_bundle)
    plain = Engine(bundle, "int8", "cpu", search_loop=False)
    fused = Engine(bundle, "int8", "cpu", search_loop=False, fused_step=True)
    assert plain.fused_step == "off" and fused.fused_step == "fused"
    shortlist = fused.shortlist
    for beam, listed in ((1, True), (4, True), (1, False), (4, False)):
        options = TranslateOptions(beam_size=beam)
        # each sentence alone: with the shortlist too. In one batch only over the whole vocabulary: with a shortlist
        # the graph normalizes every row over the batch's union, the fused step each source over its own list (what
        # it gets alone: test_every_path_gives_each_sentence_its_alone_answer). The two engines share the encoder,
        # whose fp32 attention over a padded batch is not batch-invariant on every CPU (AMD EPYC with AVX-512: 3 of
        # 12 lone answers differ from the batched ones, the same for both engines), so each engine is compared with
        # the other on the same batch
        plain.shortlist = fused.shortlist = shortlist if listed else None
        alone = tuple([engine.translate([s], options)[0] for s in SENTENCES] for engine in (plain, fused))
        batched = (plain.translate(SENTENCES, options), fused.translate(SENTENCES, options))
        for want, got in (alone,) if listed else (batched, alone):
            same = sum(a.token_ids == b.token_ids for a, b in zip(want, got, strict=True))
            assert same >= len(SENTENCES) - 1, (beam, [(a.text, b.text) for a, b in zip(want, got, strict=True)])
            for a, b in zip(want, got, strict=True):
                if a.token_ids == b.token_ids:
                    assert abs(a.score - b.score) < 0.2


def test_the_fused_search_loop_finds_the_fused_steps_hypotheses(pre_norm_bundle, use_library, caplog):
    """A lone sentence searched in the loop graph with its body fused = searched step by step on the fused step."""
    bundle = load_bundle(pre_norm_bundle)
    steps = Engine(bundle, "int8", "cpu", search_loop=False, fused_step=True)
    loop = Engine(bundle, "int8", "cpu", fused_step=True)
    for shortlist in (True, False):
        steps.shortlist = loop.shortlist = steps.shortlist if shortlist else None
        for beam in (1, 3):
            options = TranslateOptions(beam_size=beam, no_repeat_ngram_size=0)
            for sentence in SENTENCES:
                want = steps.translate([sentence], options)[0]
                got = loop.translate([sentence], options)[0]
                assert got.token_ids == want.token_ids
                assert got.score == pytest.approx(want.score, abs=1e-9)
    assert loop.search_loop is not None
    assert "keeps its step graph" not in caplog.text  # the loop's session is the fused one
    assert b"FusedDecoderStep" in fused_loop_graph(bundle.graph("int8", "decoder_loop"))


def test_engine_falls_back_to_the_graph_without_the_library(pre_norm_bundle, tmp_path, monkeypatch):
    monkeypatch.setenv(LIBRARY_ENV, str(tmp_path / "missing.so"))
    bundle = load_bundle(pre_norm_bundle)
    engine = Engine(bundle, "int8", "cpu", fused_step=True)
    assert "not built" in engine.fused_step
    assert engine.translate(SENTENCES[:2])[0].text


CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx2 {extra}\nbogomips\t: 4000\n"


def test_auto_asks_for_the_library_and_avx512_vnni_or_avx2(tmp_path, use_library, monkeypatch):
    vnni, avx2 = cpu_flags(CPUINFO.format(extra="avx512f avx512_vnni")), cpu_flags(CPUINFO.format(extra="fma"))
    plain = cpu_flags(CPUINFO.format(extra=""))  # AVX2 without FMA: the library's plain loops
    assert "avx512_vnni" in vnni and "avx2" in plain and "avx512_vnni" not in plain and "fma" not in plain
    assert cpu_flags("no flags here") == set()
    assert auto_blocker(vnni) is None
    assert auto_blocker(avx2) is None
    assert "neither AVX-512 VNNI nor AVX2 with FMA" in auto_blocker(plain)
    assert auto_blocker(set()) == auto_blocker(plain)
    monkeypatch.setenv(LIBRARY_ENV, str(tmp_path / "missing.so"))
    assert "not built" in auto_blocker(vnni)


@pytest.mark.parametrize("machine", ["vnni", "avx2", "no-fma"])
def test_engine_auto_uses_the_fused_step_only_where_auto_allows_it(
    pre_norm_bundle, use_library, monkeypatch, caplog, machine
):
    extra = {"vnni": "avx512f avx512_vnni", "avx2": "fma", "no-fma": ""}[machine]
    flags = cpu_flags(CPUINFO.format(extra=extra))
    monkeypatch.setattr("engine.fused_step.auto_blocker", lambda: auto_blocker(flags))
    bundle = load_bundle(pre_norm_bundle)
    with caplog.at_level("INFO", logger="engine.fused_step"):
        engine = Engine(bundle, "int8", "cpu", fused_step="auto")
    assert engine.fused_step == ("fused" if machine != "no-fma" else auto_blocker(flags))
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # auto's fallback is no warning
    fp32 = Engine(bundle, "fp32", "cpu", fused_step="auto")  # a graph the operator does not compute: the graphs
    assert fp32.fused_step != "fused" and fp32.translate(SENTENCES[:1])[0].text
    assert Engine(bundle, "int8", "cpu", fused_step="false").fused_step == "off"
    assert Engine(bundle, "int8", "cpu", fused_step="true").fused_step == "fused"  # true: on any CPU


def test_graphs_the_operator_does_not_compute_are_refused(pre_norm_bundle, tiny_bundle_dir, use_library, tmp_path):
    import onnx

    bundle = load_bundle(pre_norm_bundle)
    with pytest.raises(NotFused, match="MatMul"):  # fp32 products
        fused_step_graph(bundle.graph("fp32", "decoder_step_batch"))
    with pytest.raises(NotFused, match="interface"):  # the live decode's right-padded graph
        fused_step_graph(bundle.graph("int8", "decoder_step"))
    # post-norm layers are the operator's (post_norm, engine/fused_step_layout.py): the tiny bundle, trained post-norm
    post_norm = load_bundle(tiny_bundle_dir)
    engine = Engine(post_norm, "int8", "cpu", fused_step=True)
    assert engine.fused_step == "fused" and engine.translate(SENTENCES[:1])[0].text
    # an FFN activation wired otherwise (a Sigmoid alone where ReLU was, not swish's x * sigmoid(x)): refused
    path = post_norm.graph("int8", "decoder_step_batch")
    for weights in path.parent.glob("*.weights"):
        shutil.copy(weights, tmp_path / weights.name)
    model = onnx.load(str(path), load_external_data=False)
    next(n for n in model.graph.node if n.op_type == "Relu").op_type = "Sigmoid"
    onnx.save(model, str(tmp_path / path.name))
    with pytest.raises(NotFused, match="activation"):
        fused_step_graph(tmp_path / path.name)
    session, why = fused_step_session(tmp_path / path.name, "cpu", {})
    assert session is None and "activation" in why


def test_the_rewritten_graph_keeps_the_interface_and_reads_the_same_weight_file(pre_norm_bundle):
    bundle = load_bundle(pre_norm_bundle)
    path = bundle.graph("int8", "decoder_step_batch")
    model = fused_step_graph(path)
    assert b"FusedDecoderStep" in model and b"mtserve.fused" in model
    assert len(model) < path.stat().st_size * 2  # no weights copied in: they stay external
    options = ort.SessionOptions()
    graph = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    assert [i.name for i in graph.get_inputs()] == step_input_names(bundle.model_config["n_decoder_layers"], 3) + [
        "vocab_ids"
    ]


def test_the_fused_search_gives_the_fused_loops_back_pointers(pre_norm_bundle, library):
    """The whole Loop as one operator (its ranking in C, the cache written in place and never copied) = the Loop
    with its body fused: the same back-pointers and float64 scores, with and without the shortlist, greedy and
    beams; and a batch of sources in one call = each source in the loop alone."""
    bundle = load_bundle(pre_norm_bundle)
    engine = Engine(bundle, "int8", "cpu", search_loop=False)
    path = bundle.graph("int8", "decoder_loop")
    loop = SearchLoop(create_session(path, "cpu", model=fused_loop_graph(path), custom_ops=library))
    search = SearchLoop(create_session(path, "cpu", model=fused_search_graph(path), custom_ops=library))
    assert [i.name for i in search.session.get_inputs()] == [i.name for i in loop.session.get_inputs()] + [
        "source_limits",
        "no_repeat_ngram_size",
    ]
    assert search.batched and not loop.batched
    reordered = 0
    for sentence in SENTENCES:
        source = engine.source_ids([sentence])
        enc = engine.run_encoder(source)
        for vocab_ids in (engine.shortlist.vocab_ids(source), None):
            for beam, limit in ((1, 20), (3, 20), (4, 2), (2, 0)):
                want = loop.run(enc, limit, beam, vocab_ids)
                got = search.run(enc, limit, beam, vocab_ids)
                for name, a, b in zip(SEARCH_LOOP_OUTPUTS, want, got, strict=True):
                    if limit == 0:  # no step: the Loop's scan outputs are (0, 0), the operator's (0, k)
                        assert a.size == b.size == 0 and a.dtype == b.dtype
                        continue
                    assert a.dtype == b.dtype and a.shape == b.shape, (name, a.shape, b.shape)
                    np.testing.assert_array_equal(a, b, err_msg=f"{name}, beam {beam}, limit {limit}")
                reordered += int((want[3][:-1] != np.arange(beam)).any()) if len(want[3]) > 1 else 0
    assert reordered  # some searches continued from other beams' rows

    sources = engine.source_ids(SENTENCES)
    enc = engine.run_encoder(sources)  # padded to the longest source
    limits = [12, 3, 0, 20, 7, 1]
    for vocab_ids in (engine.shortlist.vocab_ids(sources), None):
        for beam in (1, 4):
            *arrays, steps = search._run(enc, limits, beam, vocab_ids)
            assert steps.shape == (len(SENTENCES),) and steps[2] == 0
            for i, limit in enumerate(limits):
                one = {"src_mask": enc["src_mask"][i : i + 1]}
                one |= {name: enc[name][:, i : i + 1] for name in ("cross_keys", "cross_values")}
                want = loop.run(one, limit, beam, vocab_ids)
                assert steps[i] == len(want[0]) <= max(limit, 0)
                for name, a, b in zip(SEARCH_LOOP_OUTPUTS, want, arrays, strict=True):
                    if steps[i]:
                        np.testing.assert_array_equal(a, b[: steps[i], i * beam : (i + 1) * beam], err_msg=name)


def test_concurrent_searches_on_one_session_get_their_own_answers(pre_norm_bundle, library):
    """The search keeps its key/value cache mapping for the next search (one kept per operator, grown as needed):
    searches of different batches, beams and limits at once on one session give what each gives alone."""
    bundle = load_bundle(pre_norm_bundle)
    engine = Engine(bundle, "int8", "cpu", search_loop=False)
    path = bundle.graph("int8", "decoder_loop")
    search = SearchLoop(create_session(path, "cpu", model=fused_search_graph(path), custom_ops=library))
    jobs = []
    for n, beam, limit in ((6, 4, 20), (2, 1, 9), (4, 3, 15), (1, 2, 30)):
        enc = engine.run_encoder(engine.source_ids(SENTENCES[:n]))
        jobs.append((enc, [limit] * n, beam))
    alone = [search._run(enc, limits, beam, None) for enc, limits, beam in jobs]
    got: dict[tuple[int, int], list] = {}

    def run(worker: int) -> None:
        for round_ in range(4):
            job = (worker + round_) % len(jobs)
            got[(worker, round_)] = [job, search._run(*jobs[job], None)]

    threads = [threading.Thread(target=run, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 12
    for job, arrays in got.values():
        for a, b in zip(alone[job], arrays, strict=True):
            np.testing.assert_array_equal(a, b)


def test_engine_batches_on_the_fused_search_as_each_sentence_alone(pre_norm_bundle, use_library):
    """With the fused step on, a whole batch runs in the fused search: each sentence's tokens and score are what
    the step-by-step search on the fused step gives it over the same vocabulary, alone or in the batch; with the
    n-gram block too, which the operator applies itself (no sentence is searched a second time)."""
    bundle = load_bundle(pre_norm_bundle)
    steps = Engine(bundle, "int8", "cpu", search_loop=False, fused_step=True)
    batched = Engine(bundle, "int8", "cpu", fused_step=True)
    assert batched.search_loop is not None and batched.search_loop.batched and batched.search_loop.blocks
    repeated = [*SENTENCES, "ein hund ein hund ein hund ein hund ein hund ein hund ."]
    again: list[int] = []  # how many sentences each step-by-step search after the batched one took
    step_search = batched._step_search
    batched._step_search = lambda enc, limits, *rest: again.append(len(limits)) or step_search(enc, limits, *rest)
    blocked = 0
    for shortlist in (True, False):
        steps.shortlist = batched.shortlist = steps.shortlist if shortlist else None
        for beam, block in ((1, 0), (4, 0), (1, 2), (3, 2), (2, 1), (4, 3)):
            options = TranslateOptions(beam_size=beam, no_repeat_ngram_size=block)
            want = steps.translate(repeated, options)
            unblocked = steps.translate(repeated, TranslateOptions(beam_size=beam, no_repeat_ngram_size=0))
            blocked += sum(a.token_ids != b.token_ids for a, b in zip(want, unblocked, strict=True))
            got = batched.translate(repeated, options)
            for a, b in zip(want, got, strict=True):
                assert b.token_ids == a.token_ids, (beam, block, a.text, b.text)
                assert b.score == pytest.approx(a.score, abs=1e-9)
            for sentence in repeated[-2:]:  # alone: the loop path of one source
                a, b = steps.translate([sentence], options)[0], batched.translate([sentence], options)[0]
                assert b.token_ids == a.token_ids and b.score == pytest.approx(a.score, abs=1e-9)
    assert not again  # the operator blocked; nothing was searched again
    assert blocked  # and the block changed some translations


def test_each_source_normalizes_over_its_own_ids_as_it_does_alone(pre_norm_bundle, library):
    """``vocab_sources``: with a batch's union of shortlists as ``vocab_ids``, each source's rows normalize over the
    ids it owns, so its log-probabilities, top values and top ids are, to the bit, the ones it gets with only its
    own ids (issue 56: a sentence's answer does not depend on the companions that widen the union)."""
    bundle, _, fused = _sessions(pre_norm_bundle, library)
    assert has_vocab_sources(fused)
    rng = np.random.default_rng(5)
    vocab = bundle.model_config["vocab_size"]
    common = rng.choice(np.arange(4, vocab), 30, replace=False)
    own = [np.unique(np.concatenate([common, rng.choice(np.arange(4, vocab), 25, replace=False)])) for _ in range(3)]
    union = np.unique(np.concatenate(own))
    feeds = _step_feeds(bundle, rng, vocab_ids=union)
    mask = np.stack([np.isin(union, ids) for ids in own])
    widened = fused.run(None, feeds)  # today's: every row over the union
    batched = fused.run(None, {**feeds, VOCAB_SOURCES: mask})
    source_of = feeds["row_slots"] // feeds["query_rows"].shape[1]
    changed = 0
    for s, ids in enumerate(own):
        alone = fused.run(None, {**feeds, "vocab_ids": ids})
        rows = np.flatnonzero(source_of == s)
        np.testing.assert_array_equal(batched[0][rows][:, mask[s]], alone[0][rows])
        assert np.all(np.isneginf(batched[0][rows][:, ~mask[s]]))
        for out in (1, 2):  # top_log_probs, top_ids (vocabulary ids)
            np.testing.assert_array_equal(batched[out][rows], alone[out][rows])
        changed += not np.array_equal(widened[1][rows], alone[1][rows])
        for got, want in zip(batched[3:], alone[3:], strict=True):  # the presents: the same step
            np.testing.assert_array_equal(got[rows], want[rows])
    assert changed  # without vocab_sources the union does change the sources' log-probabilities


def test_bad_vocab_sources_are_refused(pre_norm_bundle, library):
    bundle, _, fused = _sessions(pre_norm_bundle, library)
    rng = np.random.default_rng(6)
    union = np.arange(10, 60)
    feeds = _step_feeds(bundle, rng, vocab_ids=union)
    for bad in (np.ones((2, 50), dtype=bool), np.ones((3, 49), dtype=bool), np.zeros((3, 50), dtype=bool)):
        with pytest.raises(Exception, match="vocab_sources|owns"):
            fused.run(None, {**feeds, VOCAB_SOURCES: bad})
    fused.run(None, {**feeds, VOCAB_SOURCES: np.ones((3, 50), dtype=bool)})  # and the session still works


@pytest.mark.parametrize("kernel", ["default", "avx2"])
def test_every_path_gives_each_sentence_its_alone_answer(
    pre_norm_bundle, library, forced_libraries, monkeypatch, kernel
):
    """Issue 56: on the fused step a sentence's tokens and score are the same alone (the search loop), in a whole
    batch (the fused search, and the step-by-step search) and live beside sentences joining at other steps (the
    continuous decode), with the lexical shortlist (each source over its own list within the batch's union) and the
    n-gram block. No thread timing: the batches are built by hand."""
    from engine.live import LiveBatch

    monkeypatch.setenv(LIBRARY_ENV, str(_kernel_library(kernel, library, forced_libraries, monkeypatch)))
    bundle = load_bundle(pre_norm_bundle)
    loop = Engine(bundle, "int8", "cpu", fused_step=True)
    steps = Engine(bundle, "int8", "cpu", fused_step=True, search_loop=False)
    assert loop.shortlist is not None and loop.live_step is loop.step_decoder and loop.fused_step == "fused"
    sentences = [*SENTENCES, "ein hund ein hund ein hund ein hund ein hund .", "zwei frauen ."]
    for beam, block in ((1, 0), (4, 0), (3, 2)):
        options = TranslateOptions(beam_size=beam, no_repeat_ngram_size=block)
        alone = [loop.translate([s], options)[0] for s in sentences]
        live, results = LiveBatch(loop), {}
        joining = {0: [0, 1], 1: [2], 3: [3, 4, 5], 4: [6], 6: [7]}  # step -> sentences joining before it
        step = 0
        while len(live) or any(at >= step for at in joining):
            items = [(i, loop.source_ids([sentences[i]])[0], options, False) for i in joining.get(step, [])]
            results.update(live.add(items)[0])
            results.update(live.step().finished)
            step += 1
        paths = {
            "batch": loop.translate(sentences, options),
            "batch, step by step": steps.translate(sentences, options),
            "live": [results[i] for i in range(len(sentences))],
        }
        for path, got in paths.items():
            for want, have in zip(alone, got, strict=True):
                assert have.token_ids == want.token_ids, (path, beam, block, want.text, have.text)
                assert have.score == pytest.approx(want.score, abs=1e-6), (path, beam, block)


def test_the_split_ranking_gives_the_whole_subsets_bits(pre_norm_bundle, library, monkeypatch):
    """The fused search with vocab_sources ranks each source's rows over its own columns only (the columns every
    source owns as one product, each source's others as another: fused_step_op.c ``split_rank``); its back-pointers
    and float64 scores are those of the ranking over the whole subset's product (MT_FUSED_STEP_SPLIT=0), greedy and
    beams, with and without the n-gram block (whose bans can leave a row too few own columns: the whole subset then)."""
    bundle = load_bundle(pre_norm_bundle)
    engine = Engine(bundle, "int8", "cpu", search_loop=False)
    path = bundle.graph("int8", "decoder_loop")
    search = SearchLoop(create_session(path, "cpu", model=fused_search_graph(path), custom_ops=library))
    sentences = [*SENTENCES, "ein hund ein hund ein hund ein hund ein hund ."]
    sources = engine.source_ids(sentences)
    enc = engine.run_encoder(sources)
    vocab_ids = engine.shortlist.vocab_ids(sources)
    owners = engine.shortlist.owners(sources, vocab_ids)
    assert not owners.all(axis=0).all()  # the sources own different columns
    limits = [12, 3, 20, 20, 7, 9, 20]
    for beam, block in ((1, 0), (4, 0), (2, 1), (3, 2)):
        monkeypatch.setenv("MT_FUSED_STEP_SPLIT", "0")
        want = search._run(enc, limits, beam, vocab_ids, block, owners)
        monkeypatch.delenv("MT_FUSED_STEP_SPLIT")
        got = search._run(enc, limits, beam, vocab_ids, block, owners)
        for name, a, b in zip([*SEARCH_LOOP_OUTPUTS, "source_steps"], want, got, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"{name}, beam {beam}, block {block}")
