"""The live decoding state (continuous batching) without HTTP: sentences join a running batch at any step, leave
the step they finish or whenever they are removed, and every sentence gets the answer it gets alone."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import onnx
import pytest
from tiny_bundle import SAMPLE_SENTENCES, WORD_MAP

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from engine.live import LiveBatch, supports_live
from engine.no_repeat import repeats_ngram
from engine.runtime import create_session
from engine.step_inputs import uniform_inputs

RUNNING = [  # a running batch mixing searches, beam sizes, length penalties and limits
    ("ein kind rennt im park und spielt", TranslateOptions()),
    ("eine kleine rote katze sitzt unter dem blauen ball", TranslateOptions(beam_size=4, num_hypotheses=2)),
    ("die katze sitzt auf dem ball", TranslateOptions(beam_size=2, max_length=4, length_penalty=1.0)),
]
JOINERS = [
    ("der hund spielt im park", TranslateOptions()),
    ("ein mann und eine frau sitzen", TranslateOptions(beam_size=3, num_hypotheses=3, length_penalty=0.2)),
]


@pytest.fixture(scope="module", params=["fp32", "int8"])
def engine(request, tiny_bundle_dir) -> Engine:
    return Engine(load_bundle(tiny_bundle_dir), variant=request.param, providers="cpu")


@pytest.fixture(scope="module")
def alone(engine):
    """A sentence's answer decoded alone, in a live batch of its own: what continuous batching promises it beside
    any others (the live step graph computes a row's outputs to the bit whatever rows share its step). The
    whole-batch search runs another step graph (decoder_step_batch), whose int8 answers may differ in a score's last
    quantization step: test_live_alone_equals_the_whole_batch_search_alone holds the two together in fp32."""
    cache: dict = {}

    def get(text: str, options: TranslateOptions):
        if (text, options) not in cache:
            results: dict = {}
            run(LiveBatch(engine), {0: [("alone", engine.source_ids([text])[0], options, False)]}, results)
            cache[text, options] = results["alone"]
        return cache[text, options]

    return get


def assert_same(got, want, label=""):
    assert got.token_ids == want.token_ids, label
    assert got.text == want.text, label
    assert [h[2] for h in got.hypotheses] == [h[2] for h in want.hypotheses], label
    assert got.score == pytest.approx(want.score, abs=1e-5), label
    for (_, a, _), (_, b, _) in zip(got.hypotheses, want.hypotheses, strict=True):
        assert a == pytest.approx(b, abs=1e-5), label


def run(live: LiveBatch, schedule: dict[int, list], results: dict, progress: dict | None = None) -> int:
    """Steps until nothing is live or scheduled; ``schedule`` maps a step number to the items joining before it."""
    step = 0
    while len(live) or any(s >= step for s in schedule):
        if step in schedule:
            done, _ = live.add(schedule[step])
            results.update(done)
        out = live.step()
        results.update(out.finished)
        if progress is not None:
            for key, tokens in out.progress.items():
                progress.setdefault(key, []).extend(tokens)
        step += 1
    return step


def test_live_alone_equals_the_whole_batch_search_alone(tiny_bundle_dir):
    """fp32: the live decode of a sentence alone and the whole-batch search of it alone (Engine.translate: the search
    loop graph or the step-by-step search, decoder_step_batch) give the same tokens and scores, blocks included.
    (int8 is not held to this: the two step graphs sum in different orders, and a last-bit difference at a
    QuantizeLinear's rounding boundary moves a score by a quantization step; docs/reliability.md.)"""
    engine = Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu")
    kinds = [o for _, o in RUNNING + JOINERS] + [
        TranslateOptions(beam_size=4, no_repeat_ngram_size=2),
        TranslateOptions(no_repeat_ngram_size=1),
    ]
    for text in SAMPLE_SENTENCES:
        for options in kinds:
            results: dict = {}
            run(LiveBatch(engine), {0: [("alone", engine.source_ids([text])[0], options, False)]}, results)
            assert_same(results["alone"], engine.translate([text], options)[0], f"{text!r} {options}")


def test_engine_of_the_tiny_bundle_supports_live_batches(engine):
    assert supports_live(engine)


def test_a_sentence_joining_at_step_k_gets_its_alone_answer_for_every_k(engine, alone):
    sources = {text: engine.source_ids([text])[0] for text, _ in RUNNING + JOINERS}
    running = [(i, sources[text], options, False) for i, (text, options) in enumerate(RUNNING)]
    results: dict = {}
    steps = run(LiveBatch(engine), {0: running}, results)
    for i, (text, options) in enumerate(RUNNING):
        assert_same(results[i], alone(text, options), f"running sentence {i} without a joiner")
    assert steps >= 5
    for j, (text, options) in enumerate(JOINERS):
        for k in range(steps + 1):  # k = steps: it joins as the last running sentence finishes
            results = {}
            joiner = ("joiner", sources[text], options, False)
            schedule = {0: running + [joiner]} if k == 0 else {0: running, k: [joiner]}
            run(LiveBatch(engine), schedule, results)
            assert_same(results["joiner"], alone(text, options), f"joiner {j} at step {k}")
            for i, (text_i, options_i) in enumerate(RUNNING):
                assert_same(results[i], alone(text_i, options_i), f"running sentence {i}, joiner {j} at step {k}")


def test_a_stream_of_newcomers_every_step(engine, alone):
    """Forty sentences of every kind join one or two per step (source slots grow, holes are reused and compacted);
    every answer is the alone answer."""
    rng = random.Random(5)
    words = sorted(WORD_MAP)
    texts = SAMPLE_SENTENCES + [" ".join(rng.choice(words) for _ in range(rng.randint(1, 16))) for _ in range(35)]
    kinds = [o for _, o in RUNNING + JOINERS] + [TranslateOptions(beam_size=4, max_length=2)]
    schedule: dict[int, list] = {}
    for i, text in enumerate(texts):
        item = (i, engine.source_ids([text])[0], kinds[i % len(kinds)], False)
        schedule.setdefault(i // 2 + (i % 3 == 0), []).append(item)
    live = LiveBatch(engine)
    results: dict = {}
    run(live, schedule, results)
    assert len(results) == len(texts) and len(live) == 0 and live.rows == 0
    for i, text in enumerate(texts):
        assert_same(results[i], alone(text, kinds[i % len(kinds)]), f"sentence {i}")


def test_the_repeated_ngram_block_decodes_live_with_the_alone_answer(engine, alone):
    """Sentences with blocks of 1, 2 and 3 tokens (and none) join one or two per step, greedy and beam: each gets
    the answer the blocked search gives it alone, and the block changed some of them."""
    rng = random.Random(7)
    words = sorted(WORD_MAP)
    texts = SAMPLE_SENTENCES + [" ".join(rng.choice(words) for _ in range(rng.randint(4, 16))) for _ in range(25)]
    kinds = [
        TranslateOptions(no_repeat_ngram_size=1),
        TranslateOptions(beam_size=4, num_hypotheses=2, no_repeat_ngram_size=2),
        TranslateOptions(no_repeat_ngram_size=3, max_length=12),
        TranslateOptions(beam_size=2, no_repeat_ngram_size=1),
        TranslateOptions(beam_size=3, no_repeat_ngram_size=0),
    ]
    schedule: dict[int, list] = {}
    for i, text in enumerate(texts):
        schedule.setdefault(i // 2, []).append((i, engine.source_ids([text])[0], kinds[i % len(kinds)], False))
    live = LiveBatch(engine)
    results: dict = {}
    run(live, schedule, results)
    assert len(results) == len(texts) and len(live) == 0
    changed = 0
    for i, text in enumerate(texts):
        options = kinds[i % len(kinds)]
        assert_same(results[i], alone(text, options), f"sentence {i}")
        unblocked = alone(text, replace(options, no_repeat_ngram_size=0))
        changed += results[i].token_ids != unblocked.token_ids
    assert changed >= 5, changed


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_the_block_decodes_live_over_a_shortlist(shortlisted, variant):
    """With a shortlist the graph's TopK ranks every row's candidates over the step's subset (the block widens it):
    no answer repeats a blocked n-gram, where the same schedule without the block repeats some. (Beside others a
    sentence decodes over the union of their lists, so its answer is not held to its alone answer here: live.py.)"""
    engine = Engine(load_bundle(shortlisted), variant=variant, providers="cpu")
    assert LiveBatch(engine).takes_vocab
    kinds = [TranslateOptions(no_repeat_ngram_size=1), TranslateOptions(beam_size=4, no_repeat_ngram_size=2)]
    results = []
    for block in (True, False):
        items = [
            (
                i,
                engine.source_ids([t])[0],
                kinds[i % 2] if block else replace(kinds[i % 2], no_repeat_ngram_size=0),
                False,
            )
            for i, t in enumerate(SAMPLE_SENTENCES)
        ]
        got: dict = {}
        run(LiveBatch(engine), {0: items[::2], 2: items[1::2]}, got)
        results.append(got)
    blocked, free = results
    sizes = [kinds[i % 2].no_repeat_ngram_size for i in range(len(SAMPLE_SENTENCES))]
    assert not any(repeats_ngram(blocked[i].token_ids, n) for i, n in enumerate(sizes))
    assert any(repeats_ngram(free[i].token_ids, n) for i, n in enumerate(sizes))


def test_rows_of_every_search_share_a_step_and_the_cache_shrinks_when_the_longest_leaves(engine):
    live = LiveBatch(engine)
    long_text = "eine kleine rote katze sitzt unter dem blauen ball und ein hund rennt im park"
    long_source = engine.source_ids([long_text])[0]
    live.add([("long", long_source, TranslateOptions(beam_size=2), False)])
    assert live.sources.mask.shape[1] == len(long_source)  # an empty store is fitted to its newcomer
    for _ in range(6):
        live.step()
    short_source = engine.source_ids(["der hund"])[0]
    short = [(f"s{k}", short_source, TranslateOptions(beam_size=k), False) for k in (1, 3, 4)]
    live.add(short)
    assert live.rows == 2 + 1 + 3 + 4
    out = live.step()
    assert out.rows == 10  # greedy, beam 2, 3 and 4 rows in one decoder step
    assert live.width == 7  # the long sentence's 7 positions; the newcomers' first entries sit in the last column
    assert live.sources.mask.shape[1] == len(long_source)
    assert live.remove("long") and not live.remove("long")
    # every step's cross-attention reads the store's whole width: the long source's padding went with it
    assert live.sources.mask.shape[1] == len(short_source)
    out = live.step()
    assert out.rows == 8 and live.width <= 3  # the long sentence's columns were cut
    while len(live):
        live.step()
    assert live.rows == 0


def test_a_removed_sentence_frees_its_rows_at_once_and_the_others_are_undisturbed(engine, alone):
    items = [(i, engine.source_ids([t])[0], o, False) for i, (t, o) in enumerate(RUNNING + JOINERS)]
    for victim in range(len(items)):
        for at in (0, 1, 3):
            live = LiveBatch(engine)
            live.add(items)
            results: dict = {}
            for _ in range(at):
                results.update(live.step().finished)
            if victim in results:
                continue
            rows = live.rows
            assert live.remove(victim)
            assert live.rows == rows - items[victim][2].beam_size
            while len(live):
                results.update(live.step().finished)
            assert victim not in results
            for i, (text, options) in enumerate(RUNNING + JOINERS):
                if i != victim:
                    assert_same(results[i], alone(text, options), f"sentence {i}, {victim} removed at step {at}")


def test_streamed_tokens_are_a_prefix_that_never_changes(engine, alone):
    """Greedy streams each token the step it is chosen; beam search the prefix every live beam and every ended
    hypothesis share. What was streamed is always the start of the final answer."""
    texts = [t for t, _ in RUNNING + JOINERS] + SAMPLE_SENTENCES
    options = [TranslateOptions(), TranslateOptions(beam_size=4), TranslateOptions(beam_size=2, num_hypotheses=2)]
    items = [(i, engine.source_ids([t])[0], options[i % 3], True) for i, t in enumerate(texts)]
    results: dict = {}
    progress: dict = {}
    live = LiveBatch(engine)
    live.add(items[:5])
    seen: dict = {}
    step = 0
    while len(live) or step < 3:
        if step == 2:
            results.update(live.add(items[5:])[0])
        out = live.step()
        for key, tokens in out.progress.items():
            progress.setdefault(key, []).extend(tokens)
            final = alone(texts[key], options[key % 3]).token_ids
            assert final[: len(progress[key])] == progress[key]  # never rewritten
            seen[key] = True
        results.update(out.finished)
        step += 1
    for i in range(len(texts)):
        got = results[i]
        assert got.token_ids[: len(progress.get(i, []))] == progress.get(i, [])
        if options[i % 3].beam_size == 1:  # greedy streams every token but the one of its last step
            assert len(progress.get(i, [])) >= len(got.token_ids) - 1
    assert any(options[key % 3].beam_size > 1 for key in seen)  # beam sentences streamed too


def test_an_empty_text_is_answered_when_it_joins(engine):
    live = LiveBatch(engine)
    done, _ = live.add([("empty", engine.source_ids([""])[0], TranslateOptions(beam_size=2, num_hypotheses=2), True)])
    assert [key for key, _ in done] == ["empty"] and done[0][1].text == "" and len(live) == 0
    assert live.step().rows == 0
    with pytest.raises(ValueError, match="already live"):
        items = [("a", engine.source_ids(["der hund"])[0], TranslateOptions(), False)]
        live.add(items)
        live.add(items)


def test_attention_is_attached_to_finished_sentences(engine, alone):
    options = TranslateOptions(beam_size=2, return_attention=True)
    live = LiveBatch(engine)
    live.add([("a", engine.source_ids(["der hund spielt"])[0], options, False)])
    results: dict = {}
    while len(live):
        results.update(live.step().finished)
    want = alone("der hund spielt", options)
    assert np.allclose(results["a"].attention, want.attention, atol=1e-5)


class _Recorder:
    """Wraps the live decode's step session; keeps a copy of every step's feeds."""

    def __init__(self, session) -> None:
        self.session, self.feeds = session, []

    def run(self, fetch, feeds):
        self.feeds.append({name: np.array(value, copy=True) for name, value in feeds.items()})
        return self.session.run(fetch, feeds)

    def __getattr__(self, name: str):
        return getattr(self.session, name)


def _step_graph_showing_what_it_rounds(engine, folder):
    """A session of a copy of the engine's step graph that also returns the input of every QuantizeLinear (the
    activations the int8 graph rounds to uint8; none in fp32); returns it and those names."""
    model = onnx.load(str(engine.bundle.graph(engine.variant, "decoder_step")))
    rounded = sorted({n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"})
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in rounded)
    path = folder / "decoder_step_rounded.onnx"
    onnx.save(model, str(path))
    return create_session(path, "cpu"), rounded


def _alone_feeds(feeds: dict, rows: np.ndarray, slot: int) -> dict:
    """The feeds of one sentence's ``rows`` of a live step as the whole-batch search gives them alone: its real
    cache columns only (the first ``positions`` of the columns its self mask marks, whatever the padding's side),
    its source without padding, its rows as the only group."""
    past = int(feeds["positions"][rows[0], 0])
    columns = np.flatnonzero(feeds["self_mask"][rows[0]])[:past]
    length = int(feeds["src_mask"][slot].sum())
    alone = {"tokens": feeds["tokens"][rows], "top_k": feeds["top_k"], **uniform_inputs(len(rows), 1, past)}
    alone["src_mask"] = feeds["src_mask"][slot : slot + 1, :length]
    for name, value in feeds.items():
        if name.startswith("cross_"):
            alone[name] = np.ascontiguousarray(value[slot : slot + 1, :, :length])
        elif name.startswith("past_"):
            alone[name] = np.ascontiguousarray(value[rows][:, :, columns])
    return alone


def test_a_row_of_a_mixed_live_step_computes_what_it_computes_alone(engine, tmp_path):
    """Issue 36. Every row of every step of a mixed live decode (greedy and beam 2 to 4 sharing steps, sentences
    joining while others finish, sources of different lengths in the cross-attention slots) computes bit for bit
    what the same sentence's rows compute alone: the step's outputs, and in int8 every activation the graph rounds to
    uint8. A last-bit difference there is not float noise: at a rounding boundary it becomes a whole uint8 step (a
    score 0.015 off). The old live layout (left-padded cache, greedy query groups of one) failed this in most rows."""
    session, rounded = _step_graph_showing_what_it_rounds(engine, tmp_path)
    outputs = [o.name for o in session.get_outputs()]
    rng = random.Random(36)
    words = sorted(WORD_MAP)
    extra = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 14))) for _ in range(14)]
    texts = [t for t, _ in RUNNING + JOINERS] + extra
    kinds = [o for _, o in RUNNING + JOINERS] + [TranslateOptions(beam_size=4, max_length=3)]
    schedule: dict[int, list] = {}
    for i, text in enumerate(texts):
        schedule.setdefault((0, 0, 1, 2, 4, 5, 7, 9)[i % 8] + i // 8, []).append(
            (i, engine.source_ids([text])[0], kinds[i % len(kinds)], False)
        )
    live = LiveBatch(engine)
    live.session = recorder = _Recorder(live.session)
    results: dict = {}
    run(live, schedule, results)
    assert len(results) == len(texts)
    checked, differing = 0, []
    for step, feeds in enumerate(recorder.feeds):
        got = dict(zip(outputs, session.run(outputs, feeds), strict=True))
        group = feeds["query_rows"].shape[1]
        sources = feeds["row_slots"] // group
        for slot in np.unique(sources).tolist():
            rows = np.flatnonzero(sources == slot)
            alone = dict(zip(outputs, session.run(outputs, _alone_feeds(feeds, rows, slot)), strict=True))
            present = np.flatnonzero(feeds["self_mask"][rows[0]])  # its real columns and the new one
            diffs = {}
            for name in outputs:
                mine = got[name][rows]
                if name.startswith("present_"):
                    mine = mine[:, :, present]
                if not np.array_equal(mine, alone[name]):
                    diffs[name] = float(np.abs(mine.astype(np.float64) - alone[name]).max())
            if diffs:
                differing.append((step, slot, diffs))
            checked += 1
    assert checked > 100 and (rounded or engine.variant == "fp32")
    assert not differing, f"{len(differing)} of {checked} sentence steps differ from alone, e.g. {differing[:3]}"
