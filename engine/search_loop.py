"""The search of a lone sentence in one onnxruntime call, on a bundle's ``decoder_loop`` graph.

The graph (core/graphs.py ``SEARCH_LOOP``, built by export/search_loop.py) is the whole-batch step graph inside an
ONNX Loop that ranks a sentence's k beams' candidates each step; it returns per-step back-pointers, from which
``SearchLoop.search`` rebuilds the hypotheses exactly as engine/search.py's ``_beam_one`` builds them (and
for k = 1 the greedy hypothesis of ``_greedy_one``): the same tokens and the same float64 scores.
``tests/engine/test_engine_search_loop.py`` holds the two to equality.

With a repeated-n-gram block (engine/no_repeat.py) the graph searches unblocked and ``search`` checks the
answer: a step's ranking (``rank_one``) only ever reads its candidates up to the k-th one that goes on, so when no
candidate that went on at any step completes an n-gram its hypothesis already holds, no banned token was among those
read and the blocked search ranks every step alike (banned tokens are never EOS). Otherwise it returns None and the
caller searches step by step with the block. The fused search graph (engine/fused_step_graph.py
``fused_search_graph``: ``batched`` and ``blocks``) applies the block itself, so its answers pass that check.
"""

from __future__ import annotations

import numpy as np

from core.graphs import (
    MAX_TOP_K_KEY,
    NO_REPEAT_NGRAM,
    SEARCH_LOOP_OUTPUTS,
    SOURCE_LIMITS,
    SOURCE_STEPS,
    VOCAB_IDS,
    VOCAB_SOURCES,
    has_vocab_sources,
)
from core.search import DEFAULT_LENGTH_PENALTY, Hypothesis
from core.tokenizer import BOS_ID
from engine.no_repeat import banned_after


class SearchLoop:
    def __init__(self, session) -> None:
        self.session = session
        names = [i.name for i in session.get_inputs()]
        self.n_layers = sum(1 for n in names if n.startswith("past_keys_"))
        self.takes_vocab_ids = VOCAB_IDS in names
        self.batched = SOURCE_LIMITS in names  # the fused search graph: a batch of sources in one call
        self.blocks = NO_REPEAT_NGRAM in names  # ... that applies the n-gram block itself
        self.takes_vocab_sources = has_vocab_sources(session)  # ... and normalizes each source over its own ids
        self.max_top_k = int(session.get_modelmeta().custom_metadata_map.get(MAX_TOP_K_KEY, 1 << 30))

    def serves(self, beam_size: int, vocab_ids: np.ndarray | None) -> bool:
        """Whether a search of ``beam_size`` beams over ``vocab_ids`` (None: the whole vocabulary) runs here: the
        step graph's TopK must serve the 2 * beam candidates a step ranks (the step-by-step search ranks the full
        log-probabilities in numpy beyond that), and a subset needs a graph that takes vocab_ids."""
        if vocab_ids is not None and len(vocab_ids) and not self.takes_vocab_ids:
            return False
        most = len(vocab_ids) if vocab_ids is not None and len(vocab_ids) else self.max_top_k
        return 2 * beam_size <= most

    def run(
        self, enc: dict[str, np.ndarray], limit: int, beam_size: int, vocab_ids: np.ndarray | None, block: int = 0
    ) -> list[np.ndarray]:
        """The graph's back-pointers (SEARCH_LOOP_OUTPUTS, (steps, k) each) for the one source of ``enc``; ``block``:
        the n-gram block's size where the graph applies it (``self.blocks``), else ignored."""
        return self._run(enc, [limit], beam_size, vocab_ids, block)[: len(SEARCH_LOOP_OUTPUTS)]

    def _run(
        self,
        enc: dict[str, np.ndarray],
        limits: list[int],
        beam_size: int,
        vocab_ids: np.ndarray | None,
        block: int = 0,
        vocab_sources: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        if not self.serves(beam_size, vocab_ids):
            raise ValueError(f"beam {beam_size} over this vocabulary needs the step-by-step search")
        k, sources = beam_size, len(limits)
        keys, values = enc["cross_keys"], enc["cross_values"]  # (layers, sources, heads, src, d_head)
        if keys.shape[1] != sources or (sources > 1 and not self.batched):
            raise ValueError(f"{sources} limits for {keys.shape[1]} sources (a loop graph searches one)")
        empty = np.zeros((sources * k, keys.shape[2], 0, keys.shape[4]), dtype=keys.dtype)
        scores = np.full((sources, k), -np.inf, dtype=np.float64)
        scores[:, 0] = 0.0  # identical start beams: keep one alive
        feeds = {
            "max_steps": np.array(max(limits), dtype=np.int64),
            "tokens": np.full((sources * k, 1), BOS_ID, dtype=np.int64),
            "scores": scores.reshape(-1, 1),
            "src_mask": enc["src_mask"],
        }
        if self.batched:
            feeds[SOURCE_LIMITS] = np.asarray(limits, dtype=np.int64)
        if self.blocks:
            feeds[NO_REPEAT_NGRAM] = np.array(block, dtype=np.int64)
        for i in range(self.n_layers):
            feeds[f"past_keys_{i}"] = feeds[f"past_values_{i}"] = empty
            feeds[f"cross_keys_{i}"], feeds[f"cross_values_{i}"] = keys[i], values[i]
        if self.takes_vocab_ids:  # empty: the whole vocabulary
            feeds[VOCAB_IDS] = vocab_ids if vocab_ids is not None else np.zeros(0, dtype=np.int64)
        if vocab_sources is not None and self.takes_vocab_sources and vocab_ids is not None and len(vocab_ids):
            feeds[VOCAB_SOURCES] = vocab_sources
        outputs = SEARCH_LOOP_OUTPUTS + ([SOURCE_STEPS] if self.batched else [])
        return self.session.run(outputs, feeds)

    def search(
        self,
        enc: dict[str, np.ndarray],
        limit: int,
        beam_size: int = 1,
        length_penalty: float = DEFAULT_LENGTH_PENALTY,
        n_best: int = 1,
        vocab_ids: np.ndarray | None = None,
        no_repeat_ngram_size: int = 0,
    ) -> list[Hypothesis] | None:
        """The ``n_best`` best hypotheses of the one source of ``enc`` (run_encoder's outputs), at most ``limit``
        tokens, ``beam_size`` beams (1: greedy) ranked with ``length_penalty``; None when
        ``no_repeat_ngram_size`` (> 0) would have banned a token this search took (see the module's text)."""
        pointers = [a.tolist() for a in self.run(enc, limit, beam_size, vocab_ids, no_repeat_ngram_size)]
        return _hypotheses(pointers, limit, beam_size, length_penalty, n_best, no_repeat_ngram_size)

    def search_batch(
        self,
        enc: dict[str, np.ndarray],
        limits: list[int],
        beam_size: int = 1,
        length_penalty: float = DEFAULT_LENGTH_PENALTY,
        n_best: int = 1,
        vocab_ids: np.ndarray | None = None,
        no_repeat_ngram_size: int = 0,
        vocab_sources: np.ndarray | None = None,
    ) -> list[list[Hypothesis] | None]:
        """``search`` for each source of ``enc`` (limits[i]: source i's), all in one call of a batched graph
        (``self.batched``); each source's answer is the one ``search`` gives it alone over the same ``vocab_ids``,
        or, with ``vocab_sources`` (sources, subset: Engine.vocab_owners), over its own ids of them: the one it gets
        alone over its own shortlist."""
        k = beam_size
        *arrays, steps = self._run(enc, limits, k, vocab_ids, no_repeat_ngram_size, vocab_sources)
        if k == 1 and not no_repeat_ngram_size:
            return greedy_hypotheses(arrays, limits, steps.tolist())
        found = []
        for i, (limit, n) in enumerate(zip(limits, steps.tolist(), strict=True)):
            pointers = [a[:n, i * k : (i + 1) * k].tolist() for a in arrays]
            if no_repeat_ngram_size:
                found.append(_hypotheses(pointers, limit, k, length_penalty, n_best, no_repeat_ngram_size))
            else:
                found.append(traced_hypotheses(pointers, limit, k, length_penalty, n_best))
        return found


def greedy_hypotheses(arrays: list[np.ndarray], limits: list[int], steps: list[int]) -> list[list[Hypothesis] | None]:
    """``_hypotheses`` of every source of a greedy search without the n-gram block (k = 1: the one beam goes on from
    itself, so its tokens are the going ids so far), from the batch's back-pointers (SEARCH_LOOP_OUTPUTS, (steps,
    sources) each) read once: a step loop in Python per source cost ~5% of greedy batch 32 (speed-log item 57).
    Source i ends at the first of its steps < steps[i] that ended it (its tokens before that step, the ended score)
    or reached its limit (its tokens through that step, the going score); none: no hypothesis."""
    ended, _, ended_scores, _, ids, going_scores = (a.T.tolist() for a in arrays)
    found: list[list[Hypothesis] | None] = []
    for i, (limit, n) in enumerate(zip(limits, steps, strict=True)):
        last = min(max(limit - 1, 0), n - 1)  # the step where the limit ends the search, within its steps
        t = ended[i].index(True, 0, last + 1) if True in ended[i][: last + 1] else -1
        if t >= 0:
            found.append([Hypothesis(ids[i][:t], ended_scores[i][t], ended_scores[i][t])])
        elif last >= 0 and last == max(limit - 1, 0):
            found.append([Hypothesis(ids[i][: last + 1], going_scores[i][last], going_scores[i][last])])
        else:
            found.append([])
    return found


def _trace(beams: list[list[int]], ids: list[list[int]], t: int, beam: int) -> list[int]:
    """The tokens of the hypothesis in beam ``beam`` before step ``t``: the going ids it came through, traced back."""
    tokens = []
    for s in range(t - 1, -1, -1):
        tokens.append(ids[s][beam])
        beam = beams[s][beam]
    tokens.reverse()
    return tokens


def traced_hypotheses(
    pointers: list[list[list]], limit: int, k: int, length_penalty: float, n_best: int
) -> list[Hypothesis]:
    """``_hypotheses`` without the n-gram block: the same hypotheses, each finished one's tokens traced back through
    the back-pointers instead of every beam's history copied at every step (the step loop in Python was ~7% of beam 4
    batch 32, speed-log item 57)."""
    ended, ended_beams, ended_scores, beams, ids, going_scores = pointers
    finished: list[Hypothesis] = []
    for t in range(len(ended)):
        if True in ended[t]:
            for flag, beam, score in zip(ended[t], ended_beams[t], ended_scores[t], strict=True):
                if flag:
                    finished.append(Hypothesis.beam(_trace(beams, ids, t, beam), score, t + 1, length_penalty))
            if len(finished) >= k:
                break
        if t + 1 >= limit:  # length limit: the live hypotheses end as they are
            for g, score in enumerate(going_scores[t]):
                seq = _trace(beams, ids, t + 1, g)
                finished.append(Hypothesis.beam(seq, score, len(seq), length_penalty))
            break
    if k == 1:  # greedy: ranked by the score itself
        return [Hypothesis(h.tokens, h.score, h.score) for h in finished[:1]]
    return sorted(finished, key=lambda h: -h.normalized)[:n_best]


def _hypotheses(
    pointers: list[list[list]], limit: int, k: int, length_penalty: float, n_best: int, no_repeat_ngram_size: int
) -> list[Hypothesis] | None:
    """One source's hypotheses from its back-pointers (SEARCH_LOOP_OUTPUTS as lists, steps x k), as ``_beam_one``
    builds them; None when the n-gram block would have banned a token the search took."""
    ended, ended_beams, ended_scores, beams, ids, going_scores = pointers
    finished: list[Hypothesis] = []
    history: list[list[int]] = [[] for _ in range(k)]
    for t in range(len(ended)):  # as _beam_one, from the loop's back-pointers
        # a beam that goes on completes an n-gram its hypothesis holds: refused
        if no_repeat_ngram_size:
            banned = banned_after(np.asarray(history, np.int64).reshape(k, t), np.full(k, t), no_repeat_ngram_size)
            if any(token in banned[b] for b, token in zip(beams[t], ids[t], strict=True)):
                return None
        for flag, beam, score in zip(ended[t], ended_beams[t], ended_scores[t], strict=True):
            if flag:
                finished.append(Hypothesis.beam(history[beam][:], score, t + 1, length_penalty))
        if len(finished) >= k:
            break
        if t + 1 >= limit:  # length limit: the live hypotheses end as they are
            for beam, token, score in zip(beams[t], ids[t], going_scores[t], strict=True):
                seq = [*history[beam], token]
                finished.append(Hypothesis.beam(seq, score, len(seq), length_penalty))
            break
        history = [[*history[beam], token] for beam, token in zip(beams[t], ids[t], strict=True)]
    if k == 1:  # greedy: ranked by the score itself
        return [Hypothesis(h.tokens, h.score, h.score) for h in finished[:1]]
    return sorted(finished, key=lambda h: -h.normalized)[:n_best]
