"""The lexical shortlist in a bundle (issue 33): ``export.cli shortlist`` adds it sealed, the rewritten step graphs
project onto a subset and map it back to vocabulary ids, the engine searches over it unless a request needs the
whole vocabulary, and with a list that covers everything it translates exactly as without one."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from tiny_bundle import SAMPLE_SENTENCES

from core.bundle import BundleError, load_bundle
from core.graphs import VOCAB_IDS, has_vocab_ids
from core.search import Hypothesis
from core.shortlist import SHORTLIST_FILE, Shortlist
from core.tokenizer import BOS_ID
from engine import Engine
from engine.constrained import Constraint
from engine.decoder_state import DecoderState
from engine.decoding import TranslateOptions
from engine.live import LiveBatch
from engine.search import TopCandidates

GREEDY, BEAM = TranslateOptions(), TranslateOptions(beam_size=4)
# sentences of the toy corpus's own words (SAMPLE_SENTENCES also hold words it never saw, "dem", "blauen", whose
# translations no table can learn)
KNOWN = ["ein mann spielt", "der hund rennt im park", "eine frau sitzt auf ball", "die rot katze sitzt unter blau ball"]


@pytest.fixture(scope="module", params=["fp32", "int8"])
def engines(request, shortlisted):
    bundle = load_bundle(shortlisted)
    return (
        Engine(bundle, variant=request.param, providers="cpu"),
        Engine(bundle, variant=request.param, providers="cpu", shortlist=False),
    )


def test_the_table_is_sealed_in_the_bundle(shortlisted, tmp_path):
    manifest = json.loads((shortlisted / "manifest.json").read_text())
    assert manifest["shortlist"]["file"] == SHORTLIST_FILE and manifest["shortlist"]["method"] == "ibm1"
    assert SHORTLIST_FILE in manifest["files"]
    assert any(i["name"] == VOCAB_IDS for i in manifest["graphs"]["decoder_step"]["inputs"])
    load_bundle(shortlisted)  # verifies
    tampered = tmp_path / "tampered"
    shutil.copytree(shortlisted, tampered)
    data = bytearray((tampered / SHORTLIST_FILE).read_bytes())
    data[-30] ^= 0xFF
    (tampered / SHORTLIST_FILE).write_bytes(bytes(data))
    with pytest.raises(BundleError, match="shortlist.npz: contents changed"):
        load_bundle(tampered)


def test_subset_log_probs_map_back_to_vocabulary_ids(engines):
    engine, full_engine = engines
    assert has_vocab_ids(engine.step_decoder) and engine.shortlist is not None
    enc = engine.run_encoder(engine.source_ids(SAMPLE_SENTENCES[:2]))
    args = (engine.step_decoder, enc["cross_keys"], enc["cross_values"], enc["src_mask"], True)
    tokens = np.full((2, 1), BOS_ID, dtype=np.int64)
    full = DecoderState(*args).step(tokens, None)  # empty vocab_ids: the whole vocabulary
    assert isinstance(full, np.ndarray) and full.shape == (2, engine.vocab_size)
    rng = np.random.default_rng(0)
    ids = np.sort(rng.choice(engine.vocab_size, 40, replace=False)).astype(np.int64)
    top = DecoderState(*args, top_k=5, vocab_ids=ids, vocab_size=engine.vocab_size).step(tokens, None)
    assert isinstance(top, TopCandidates)
    restricted = full[:, ids] - np.log(np.exp(full[:, ids]).sum(axis=1, keepdims=True))  # renormalized
    order = np.argsort(-restricted, axis=1, kind="stable")[:, :5]
    assert np.array_equal(top.ids, ids[order])  # vocabulary ids, best first
    assert np.allclose(top.log_probs, np.take_along_axis(restricted, order, axis=1), atol=1e-4)
    # the full log-probabilities of a subset step: its columns at their ids, -inf elsewhere
    state = DecoderState(*args, top_k=64, vocab_ids=ids, vocab_size=engine.vocab_size)  # more than the subset
    spread = state.step(tokens, None)
    assert spread.shape == (2, engine.vocab_size) and np.isneginf(np.delete(spread, ids, axis=1)).all()
    assert np.allclose(spread[:, ids], restricted, atol=1e-4)


def test_a_list_that_covers_everything_translates_as_the_whole_vocabulary(engines, monkeypatch):
    engine, full_engine = engines
    everything = Shortlist(
        np.arange(engine.vocab_size), np.zeros(engine.vocab_size + 1, np.int64), np.zeros(0, np.int64)
    )
    monkeypatch.setattr(engine, "shortlist", everything)
    for options in (GREEDY, BEAM):
        got, want = engine.translate(SAMPLE_SENTENCES, options), full_engine.translate(SAMPLE_SENTENCES, options)
        for a, b in zip(got, want, strict=True):
            assert a.token_ids == b.token_ids and a.text == b.text
            assert a.score == pytest.approx(b.score, abs=1e-4)


# a beam race closer than this (length-normalized log-probability) may go either way under a shortlist
NEAR_TIE = 0.1


def test_the_learned_list_keeps_the_translations(engines):
    """Greedy: the same translations (the best token of the list is the best of the vocabulary whenever the list
    holds it). Beam: the list's search renormalizes every step over the subset, which moves hypotheses' scores by
    different amounts, so the same translation where the whole vocabulary's search has a clear winner, and one of
    its two best where those two are within NEAR_TIE (on an AMD EPYC of family 26, int8: "a woman sits on ball on
    ball" -1.761 against "a woman won ball on ball" -1.796, and the list's search took the second)."""
    engine, full_engine = engines
    ids = engine.shortlist.vocab_ids(engine.source_ids(KNOWN))
    assert len(ids) < engine.vocab_size / 2  # a real subset
    got, want = engine.translate(KNOWN, GREEDY), full_engine.translate(KNOWN, GREEDY)
    assert [t.text for t in got] == [t.text for t in want]
    n_best = TranslateOptions(beam_size=4, num_hypotheses=4)
    got, want = engine.translate(KNOWN, BEAM), full_engine.translate(KNOWN, n_best)
    clear = 0
    for mine, whole in zip(got, want, strict=True):
        (best, *_), (second, *_) = whole.hypotheses[:2]
        # the search's own ranking value (a finished hypothesis's length counts its EOS)
        ranked = [Hypothesis.beam(ids, score, len(ids) + 1, BEAM.length_penalty) for _, score, ids in whole.hypotheses]
        margin = ranked[0].normalized - ranked[1].normalized
        assert margin >= 0  # the n-best list is in the search's own order
        if margin > NEAR_TIE:
            clear += 1
            assert mine.text == best
        else:
            assert mine.text in (best, second)
    assert clear >= 3  # the sentences are not all near-ties


class Recorder:
    """A step session that records the size of every vocab_ids it is fed."""

    def __init__(self, session) -> None:
        self.session, self.fed = session, []

    def __getattr__(self, name):
        return getattr(self.session, name)

    def run(self, fetch, feeds):
        self.fed.append(len(feeds[VOCAB_IDS]))
        return self.session.run(fetch, feeds)


@pytest.mark.parametrize(
    "options, subset",
    [
        (GREEDY, True),
        (BEAM, True),
        (TranslateOptions(beam_size=4, num_hypotheses=2), False),  # n-best scores: the whole vocabulary
        (TranslateOptions(return_attention=True), False),
    ],
)
def test_requests_that_need_the_whole_vocabulary_get_it(engines, monkeypatch, options, subset):
    engine, _ = engines
    recorder = Recorder(engine.step_decoder)
    monkeypatch.setattr(engine, "step_decoder", recorder)
    engine.translate(SAMPLE_SENTENCES[:2], options)
    assert recorder.fed and all((n > 0) == subset for n in recorder.fed)


def test_constrained_search_runs_over_the_whole_vocabulary(engines, monkeypatch):
    engine, full_engine = engines
    recorder = Recorder(engine.step_decoder)
    monkeypatch.setattr(engine, "step_decoder", recorder)
    term = engine.tokenizer.encode("park")
    found = engine.translate(["der hund"], BEAM, constraints=[[Constraint((tuple(term),))]])
    assert recorder.fed and all(n == 0 for n in recorder.fed)
    assert "park" in found[0].text


def test_live_decode_over_the_union_of_its_sentences(engines):
    engine, _ = engines
    live = LiveBatch(engine)
    assert live.takes_vocab
    items = [(i, ids, GREEDY, False) for i, ids in enumerate(engine.source_ids(SAMPLE_SENTENCES))]
    items.append(("nbest", engine.source_ids(["der hund"])[0], TranslateOptions(beam_size=2, num_hypotheses=2), False))
    live.add(items[:-1])
    union = live._vocab_ids([g for g in live.groups.values() if g.sentences])
    assert 0 < len(union) < engine.vocab_size
    results = {}
    for _ in range(3):
        results.update(live.step().finished)
    live.add(items[-1:])  # a sentence that needs the whole vocabulary: the steps it is live in run over it all
    assert len(live._vocab_ids([g for g in live.groups.values() if g.sentences])) == 0
    while len(live):
        results.update(live.step().finished)
    want = engine.translate(SAMPLE_SENTENCES, GREEDY)
    assert [results[i].text for i in range(len(SAMPLE_SENTENCES))] == [t.text for t in want]


def test_verify_checks_a_shortlisted_bundle_over_the_whole_vocabulary(shortlisted, tiny_model_dir, tmp_path):
    """`export.cli verify` on a bundle with a shortlist (the release runs it after the shortlist decision): its
    step graphs take vocab_ids, fed empty (the whole vocabulary, as PyTorch computes), and translations are
    compared with the engine's whole-vocabulary search."""
    from tiny_bundle import write_corpus

    from export.cli import main as export_main

    corpus = write_corpus(tmp_path / "corpus", n_train=10, n_valid=12)
    report_path = tmp_path / "verify.json"
    args = ["verify", "--bundle", str(shortlisted), "--model", str(tiny_model_dir / "release"), "--shapes", "4"]
    assert export_main([*args, "--data", str(corpus), "--split", "test", "--output", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["max_abs_diff"]["step.log_probs"] <= 1e-4
    for beam in ("beam1", "beam4"):
        assert report[beam]["identical"] == report[beam]["total"] == 12, report[beam]["differing"]


def test_the_step_benchmarks_feed_a_shortlisted_step_graph_the_whole_vocabulary(shortlisted):
    """bench.step_graphs' random feeds (also bench.profile_engine's operator profile) fill vocab_ids when the step
    graph takes it: empty, the whole vocabulary, as the benchmarks time it."""
    import json

    from bench.profile_engine import operators

    manifest = json.loads((shortlisted / "manifest.json").read_text())
    step_graph = shortlisted / manifest["variants"]["int8"]["decoder_step"]
    per_op = operators(step_graph, manifest["model"], rows=8, beam=2, steps=3)
    assert "MatMulIntegerToFloat" in per_op and all(us > 0 for us in per_op.values())
