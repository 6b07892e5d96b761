"""The repeated-n-gram block (engine/no_repeat.py, ``TranslateOptions.no_repeat_ngram_size``): no n-gram
twice in any hypothesis, greedy and beam, a sentence alike alone and in a batch, and a block no output can reach
changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_bundle import SAMPLE_SENTENCES

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from engine.no_repeat import NoRepeatNgram, banned_after, drop_banned, repeats_ngram
from engine.search import TopCandidates, beam_search, greedy_search, top_candidates

BOS, EOS, VOCAB = 1, 2, 12


def _ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def looping_step(top: int = 0):
    """A decoder that always prefers token 5, then 6, 7, ... (EOS last): left alone it loops on 5."""
    base = np.log(np.exp(-np.arange(VOCAB, dtype=np.float32)) / np.exp(-np.arange(VOCAB)).sum()).astype(np.float32)
    order = [5, 6, 7, 8, 9, 10, 11, 3, 4, 0, 1, EOS]
    row = np.empty(VOCAB, np.float32)
    row[order] = base

    def step(last: np.ndarray, rows: np.ndarray | None):
        full = np.tile(row, (len(last), 1))
        if top:
            candidates = top_candidates(full, top)
            return TopCandidates(candidates.log_probs, candidates.ids, full)
        return full

    return step


@pytest.mark.parametrize("n", [1, 2, 3])
def test_greedy_never_repeats_an_ngram(n):
    free = greedy_search(looping_step(), [20, 20], BOS, EOS)
    assert free[0].tokens == [5] * 20  # the loop the block is for
    guarded = greedy_search(NoRepeatNgram(looping_step(), n), [20, 20], BOS, EOS)
    for hyp in guarded:
        grams = _ngrams(hyp.tokens, n)
        assert len(grams) == len(set(grams)), hyp.tokens
        assert np.isfinite(hyp.score)
    assert guarded[0].tokens == guarded[1].tokens  # rows of one batch are independent


@pytest.mark.parametrize("n", [2, 3])
def test_beam_never_repeats_an_ngram_in_any_hypothesis(n):
    for top in (0, 8):  # plain log-probabilities, or the graph's top candidates with the full array beside
        nbest = beam_search(NoRepeatNgram(looping_step(top), n), [12, 12, 12], BOS, EOS, 4, 0.6, 4)
        for sentence in nbest:
            assert len(sentence) == 4
            for hyp in sentence:
                grams = _ngrams(hyp.tokens, n)
                assert len(grams) == len(set(grams)), hyp.tokens


def widening_step():
    """looping_step's top candidates from a graph-like TopK: 8 per row, or as many more as ``widen`` asks."""
    step, count = looping_step(), [8]

    def top(last, rows):
        candidates = top_candidates(step(last, rows), count[0])
        return TopCandidates(candidates.log_probs, candidates.ids)

    def widen(extra: int) -> bool:
        if 8 + extra > VOCAB:  # as a graph's TopK: no more candidates than it serves
            return False
        count[0] = 8 + extra
        return True

    return top, widen, count


@pytest.mark.parametrize("n", [2, 3])
def test_widened_candidates_equal_the_masked_full_array(n):
    top, widen, count = widening_step()
    widened = beam_search(NoRepeatNgram(top, n, widen=widen), [12, 12], BOS, EOS, 4, 0.6, 4)
    full = beam_search(NoRepeatNgram(looping_step(8), n), [12, 12], BOS, EOS, 4, 0.6, 4)
    assert count[0] == 8  # back to the graph's count after each widened step
    for a, b in zip(widened, full, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b])


def test_top_candidates_that_cannot_widen_drop_the_banned_ones():
    def step(last, rows):
        return TopCandidates(np.zeros((len(last), 2), np.float32), np.tile([5, 6], (len(last), 1)))

    guarded = NoRepeatNgram(step, 1, widen=lambda extra: False)
    guarded(np.full((1, 1), BOS), None)
    out = guarded(np.full((1, 1), 5), None)  # 5 is banned: 6 moves up, the missing candidate is -inf
    assert out.ids.tolist() == [[6, EOS]] and out.log_probs[0, 0] == 0.0 and out.log_probs[0, 1] == -np.inf
    with pytest.raises(ValueError, match="at least 1"):
        NoRepeatNgram(step, 0)


@pytest.fixture(scope="module", params=["fp32", "int8"])
def engine(request, tiny_bundle_dir):
    return Engine(load_bundle(tiny_bundle_dir), variant=request.param, providers="cpu")


@pytest.mark.parametrize("beam", [1, 4])
def test_engine_block_alone_equals_batched_and_holds(engine, beam):
    sentences = [s for s in SAMPLE_SENTENCES if len(engine.source_ids([s])[0]) < engine.max_source_tokens // 2]
    options = TranslateOptions(beam_size=beam, max_length=40, no_repeat_ngram_size=2)
    batched = engine.translate(sentences, options)
    for sentence, together in zip(sentences, batched, strict=True):
        alone = engine.translate([sentence], options)[0]
        assert alone.token_ids == together.token_ids and alone.score == pytest.approx(together.score, abs=1e-5)
        grams = _ngrams(together.token_ids, 2)
        assert len(grams) == len(set(grams)), together.token_ids


@pytest.mark.parametrize("beam", [1, 4])
def test_engine_block_no_output_reaches_changes_nothing(engine, beam):
    plain = engine.translate(SAMPLE_SENTENCES, TranslateOptions(beam_size=beam))
    far = engine.translate(SAMPLE_SENTENCES, TranslateOptions(beam_size=beam, no_repeat_ngram_size=32))
    for a, b in zip(plain, far, strict=True):
        assert a.token_ids == b.token_ids and a.score == pytest.approx(b.score, abs=1e-5)


def test_repeats_ngram():
    assert repeats_ngram([5, 6, 5, 6], 2) and not repeats_ngram([5, 6, 5, 7], 2)
    assert repeats_ngram([5, 5], 1) and not repeats_ngram([5, 6, 7], 1) and not repeats_ngram([], 4)


@pytest.mark.parametrize("beam", [1, 4])
def test_lone_search_with_the_block_equals_the_step_by_step_search(engine, beam, monkeypatch):
    """A lone sentence's search runs in the search loop graph unblocked; it is searched again step by step with the
    block only when the loop took a token the block bans: the answer is the step-by-step blocked search's, either
    way, and both paths are taken."""
    loop = engine.search_loop
    assert loop is not None  # the fast path is there to be checked
    answered: dict[int, list[bool]] = {}
    search = loop.search

    def recording(*args, **kwargs):
        found = search(*args, **kwargs)
        answered.setdefault(args[-1], []).append(found is not None)
        return found

    monkeypatch.setattr(loop, "search", recording)
    # which sizes the loop's answer passes depends on the tiny model's numerics (on an AVX-512 Xeon beam 4 repeats
    # some 3-gram in every sentence): small sizes are refused, 5 passes, 4 is mixed
    sizes = (1, 2, 3, 4, 5)
    for size in sizes:
        options = TranslateOptions(beam_size=beam, max_length=40, no_repeat_ngram_size=size)
        batched = engine.translate(SAMPLE_SENTENCES, options)  # a batch: step by step
        for sentence, together in zip(SAMPLE_SENTENCES, batched, strict=True):
            alone = engine.translate([sentence], options)[0]
            assert alone.token_ids == together.token_ids and alone.score == pytest.approx(together.score, abs=1e-5)
            assert not repeats_ngram(alone.token_ids, size)
    assert set(answered) == set(sizes)
    taken = [flag for flags in answered.values() for flag in flags]
    assert any(taken) and not all(taken), answered  # some answers from the loop, some searched again


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_banned_after_bans_what_would_repeat_an_ngram(size):
    """The rule's one definition (banned_after) on a left-padded token history, row by row, against its statement:
    a token is banned when the n-gram it would end is one the row already holds."""
    rng = np.random.default_rng(size)
    width, rows = 14, 40
    lengths = rng.integers(0, width + 1, rows)
    history = np.zeros((rows, width), np.int64)
    for r, n in enumerate(lengths.tolist()):
        history[r, width - n :] = rng.integers(3, 7, n)  # a small alphabet: many repeats
    banned = banned_after(history, lengths, size)
    for r, n in enumerate(lengths.tolist()):
        tokens = history[r, width - n :].tolist()
        held = _ngrams(tokens, size)
        want = {t for t in range(3, 7) if len(tokens) >= size - 1 and tuple([*tokens, t][-size:]) in held}
        got = {int(t) for t in banned[r] if t >= 0}
        assert got == want, (r, history[r].tolist())


def test_drop_banned_keeps_each_rows_best_candidates_that_are_left():
    ids = np.array([[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8]])
    log_probs = -np.arange(12, dtype=np.float32).reshape(3, 4)
    banned = np.array([[6, -1], [5, 7], [-1, -1]])
    got_ids, got_lp = drop_banned(ids, log_probs, banned, 2)
    assert got_ids.tolist() == [[5, 7], [6, 8], [5, 6]]
    assert got_lp.tolist() == [[0.0, -2.0], [-5.0, -7.0], [-8.0, -9.0]]
    short_ids, short_lp = drop_banned(ids[:1, :2], log_probs[:1, :2], np.array([[5, 6]]), 2)
    assert short_ids.tolist() == [[EOS, EOS]] and np.isinf(short_lp).all()
