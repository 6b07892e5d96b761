"""The search loop graph (issue 33, lever 3): a bundle's ``decoder_loop`` graph searches a lone sentence in one
session call, greedy or beam, and gives the same hypotheses (tokens, scores, n-best order) as the step-by-step
search in Python, on every variant it is built for, with and without a shortlist; the engine uses it only where it
applies."""

from __future__ import annotations

import json
import random

import numpy as np
import onnx
import pytest
from bundle_copies import without_search_loops
from tiny_bundle import SAMPLE_SENTENCES, WORD_MAP

from core.bundle import load_bundle
from core.graphs import SEARCH_LOOP, SEARCH_LOOP_OUTPUTS, VOCAB_IDS
from engine import Engine
from engine.decoding import TranslateOptions

OPTIONS = [
    TranslateOptions(),  # greedy
    TranslateOptions(max_length=3),  # greedy, cut by the length limit
    TranslateOptions(beam_size=4),
    TranslateOptions(beam_size=4, num_hypotheses=4, length_penalty=1.0),  # n-best, another length penalty
    TranslateOptions(beam_size=2, max_length=4),  # live hypotheses ended by the limit
    TranslateOptions(beam_size=5, num_hypotheses=3, length_penalty=0.0),
]


def _sentences() -> list[str]:
    rng = random.Random(5)
    words = sorted(WORD_MAP)
    return SAMPLE_SENTENCES + [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(20)]


def _same(got, want) -> None:
    assert got.token_ids == want.token_ids and got.text == want.text
    assert got.score == want.score  # the same float32 log-probabilities summed in float64 in the same order
    assert got.hypotheses == want.hypotheses  # n-best: texts, scores, tokens, in the same order


class Counter:
    """A session wrapper that counts run calls."""

    def __init__(self, session) -> None:
        self.session, self.calls = session, 0

    def __getattr__(self, name):
        return getattr(self.session, name)

    def run(self, fetch, feeds):
        self.calls += 1
        return self.session.run(fetch, feeds)


def test_every_packed_variant_carries_a_sealed_loop_over_its_batch_step_graph(tiny_bundle_dir):
    manifest = json.loads((tiny_bundle_dir / "manifest.json").read_text())
    for name, variant in manifest["variants"].items():
        rel = variant[SEARCH_LOOP]
        assert rel in manifest["files"]
        model = onnx.load(str(tiny_bundle_dir / rel), load_external_data=False)
        assert [o.name for o in model.graph.output] == SEARCH_LOOP_OUTPUTS
        body = next(n for n in model.graph.node if n.op_type == "Loop").attribute[0].g
        # the weights stay in the variant's weights file: the loop graph holds references, not copies
        assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in body.initializer), name
        assert (tiny_bundle_dir / rel).stat().st_size < 200_000
    assert SEARCH_LOOP in manifest["graphs"]


@pytest.mark.parametrize("variant", ["fp32", "int8"])  # fp16 gets no loop: tests/export/test_bundle_layout.py
def test_the_loop_finds_the_hypotheses_of_the_step_by_step_search(tiny_bundle_dir, variant):
    bundle = load_bundle(tiny_bundle_dir)
    looped = Engine(bundle, variant=variant, providers="cpu")
    stepped = Engine(bundle, variant=variant, providers="cpu", search_loop=False)
    assert looped.search_loop is not None and stepped.search_loop is None
    counter = Counter(looped.step_decoder)
    looped.step_decoder = counter
    for options in OPTIONS:
        for text in _sentences():
            (got,), (want,) = looped.translate([text], options), stepped.translate([text], options)
            _same(got, want)
    assert counter.calls == 0  # every lone sentence ran in the loop


def test_batches_and_attention_keep_the_step_by_step_search(tiny_bundle_dir):
    engine = Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu")
    counter = Counter(engine.step_decoder)
    engine.step_decoder = counter
    engine.translate(SAMPLE_SENTENCES[:2], TranslateOptions())  # two sentences: one whole batch
    engine.translate(SAMPLE_SENTENCES[:2], TranslateOptions(beam_size=4))
    assert counter.calls > 0
    calls = counter.calls
    (with_attention,) = engine.translate(SAMPLE_SENTENCES[:1], TranslateOptions(return_attention=True))
    assert counter.calls == calls  # the loop searched; the attention comes from decoder.onnx afterwards
    assert with_attention.attention is not None


def test_beams_wider_than_the_graphs_top_k_search_step_by_step(tiny_bundle_dir):
    engine = Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu")
    loop = engine.search_loop
    assert loop.serves(loop.max_top_k // 2, None) and not loop.serves(loop.max_top_k // 2 + 1, None)
    assert not loop.serves(4, np.arange(7, dtype=np.int64))  # a subset of 7 ids holds no 8 candidates
    with pytest.raises(ValueError, match="step-by-step"):
        loop.search(engine.run_encoder(engine.source_ids(["der hund"])), 10, loop.max_top_k)


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_the_loop_over_a_shortlist_searches_the_same_subset(shortlisted, variant):
    bundle = load_bundle(shortlisted)
    graph = onnx.load(str(shortlisted / bundle.manifest["variants"][variant][SEARCH_LOOP]), load_external_data=False)
    assert VOCAB_IDS in [i.name for i in graph.graph.input]  # rebuilt over the rewritten step graph
    for shortlist in (True, False):  # a subset, and an empty vocab_ids (the whole vocabulary)
        looped = Engine(bundle, variant=variant, providers="cpu", shortlist=shortlist)
        stepped = Engine(bundle, variant=variant, providers="cpu", shortlist=shortlist, search_loop=False)
        assert (looped.shortlist is not None) == shortlist
        for options in OPTIONS[:3]:
            for text in _sentences():
                (got,), (want,) = looped.translate([text], options), stepped.translate([text], options)
                _same(got, want)


def test_a_bundle_without_the_graph_searches_step_by_step(tiny_bundle_dir, tmp_path):
    copy = without_search_loops(tiny_bundle_dir, tmp_path / "de-en" / "1")
    engine = Engine(load_bundle(copy), variant="int8", providers="cpu")
    assert engine.search_loop is None
    (got,) = engine.translate(SAMPLE_SENTENCES[:1], TranslateOptions(beam_size=4))
    assert got.text


def test_greedy_hypotheses_are_the_step_loops():
    """search_batch's greedy reading of a batch's back-pointers (search_loop.greedy_hypotheses) gives what the
    per-source step loop (_hypotheses) gives: sources ended by EOS at any step (the first too), by their limit (0 and
    1 too), by neither within their steps, and with no step at all."""
    from engine.search_loop import _hypotheses, greedy_hypotheses

    rng = np.random.default_rng(11)
    sources, most = 40, 9
    ended = rng.random((most, sources)) < 0.2
    ids = rng.integers(4, 100, (most, sources))
    arrays = [
        ended,
        np.zeros((most, sources), dtype=np.int64),  # ended_beams: the one beam
        rng.normal(-5, 2, (most, sources)),
        np.zeros((most, sources), dtype=np.int64),  # going_beams: the one beam
        ids,
        rng.normal(-5, 2, (most, sources)),
    ]
    limits = rng.integers(0, 12, sources).tolist()
    steps = [min(int(rng.integers(0, most + 1)), max(limit, 1)) for limit in limits]
    got = greedy_hypotheses(arrays, limits, steps)
    kinds = set()
    for i, (limit, n) in enumerate(zip(limits, steps, strict=True)):
        pointers = [a[:n, i : i + 1].tolist() for a in arrays]
        want = _hypotheses(pointers, limit, 1, 0.6, 1, 0)
        assert got[i] == want, (i, limit, n)
        t = len(want[0].tokens) if want else 0
        kinds.add("none" if not want else "ended" if t < n and want[0].score == arrays[2][t, i] else "limit")
    assert kinds == {"none", "ended", "limit"}


@pytest.mark.parametrize("k", [1, 2, 4, 5])
def test_traced_hypotheses_are_the_step_loops(k):
    """search_batch's beam reading without the n-gram block (search_loop.traced_hypotheses: tokens traced back through
    the back-pointers) gives what the step loop copying every beam's history (_hypotheses) gives, hypotheses in the
    same order: random back-pointers, limits and steps, n-best lists, and several length penalties."""
    from engine.search_loop import _hypotheses, traced_hypotheses

    rng = np.random.default_rng(k)
    for case in range(200):
        steps = int(rng.integers(0, 10))
        pointers = [
            (rng.random((steps, k)) < 0.25).tolist(),
            rng.integers(0, k, (steps, k)).tolist(),
            rng.normal(-5, 2, (steps, k)).tolist(),
            rng.integers(0, k, (steps, k)).tolist(),
            rng.integers(4, 50, (steps, k)).tolist(),
            rng.normal(-5, 2, (steps, k)).tolist(),
        ]
        limit, n_best, penalty = int(rng.integers(0, 12)), int(rng.integers(1, k + 1)), [0.0, 0.6, 1.0][case % 3]
        want = _hypotheses(pointers, limit, k, penalty, n_best, 0)
        assert traced_hypotheses(pointers, limit, k, penalty, n_best) == want, case
