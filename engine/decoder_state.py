"""The whole-batch search's decoder state: the key/value cache of the live rows, reordered as beams move and rows
leave, one step session call a step (engine.py's searches; the constrained ones too), and the n-gram block's
processor put in front of it when the options ask (engine/no_repeat.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.graphs import (
    FUSED_STEP_KEY,
    KV_CACHE,
    MAX_TOP_K_KEY,
    VOCAB_IDS,
    VOCAB_SOURCES,
    decoder_cache,
    decoder_outputs,
    has_vocab_ids,
    has_vocab_sources,
    step_interface,
    step_present_names,
)
from core.tokenizer import PAD_ID
from engine.decoder_cache import decoder_feeds, empty_cache
from engine.decoding import TranslateOptions
from engine.no_repeat import NoRepeatNgram
from engine.reorder import ReorderBuffers
from engine.search import TopCandidates
from engine.step_inputs import uniform_inputs


def guarded(state: DecoderState, options: TranslateOptions):
    """The state's step, wrapped to ban repeated n-grams when the options ask (engine/no_repeat.py)."""
    if not options.no_repeat_ngram_size:
        return state.step
    if state.fetch_top:  # the guard asks the graph's TopK for as many more candidates as a row has banned tokens
        return NoRepeatNgram(state.step, options.no_repeat_ngram_size, widen=state.widen)
    return NoRepeatNgram(state.step, options.no_repeat_ngram_size)  # every log-probability comes anyway


def pad_batch(sequences: Sequence[Sequence[int]]) -> np.ndarray:
    width = max(len(s) for s in sequences)
    out = np.full((len(sequences), width), PAD_ID, dtype=np.int64)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = s
    return out


class DecoderState:
    """Key/value cache of the live rows; ``step`` reorders it (beam moves, finished rows leave) and runs one step.

    Works with either decoder graph: the lean ``decoder_step`` graph (``lean=True``: per-layer cache inputs,
    no attention outputs) or ``decoder`` (stacked (layers, ...) caches). ``cross_keys`` / ``cross_values`` /
    ``src_mask`` hold one row per source; row r of the batch reads source ``row_sources[r]`` (default: row r).
    They depend only on the source, so they are gathered again only when the live sources change (a sentence
    left the batch), never when beams of one sentence trade places. Step graphs of interface 2 take them
    once per live source (rows grouped by source); older graphs once per row. With decoder.onnx of a linear-attention
    model, ``past_keys`` / ``past_values`` hold its running sums (core/graphs.py, ``LINEAR_STATE``) and ``length``
    counts the tokens summed.
    """

    def __init__(
        self,
        session,
        cross_keys: np.ndarray,
        cross_values: np.ndarray,
        src_mask: np.ndarray,
        lean: bool = False,
        row_sources: np.ndarray | None = None,
        top_k: int = 1,
        vocab_ids: np.ndarray | None = None,
        vocab_size: int = 0,
        vocab_sources: np.ndarray | None = None,
    ) -> None:
        """``vocab_ids``: the ascending vocabulary subset (of a ``vocab_size``-id vocabulary) the step projects onto
        (the lexical shortlist, core/shortlist.py), for a step graph that takes it; None = the whole vocabulary."""
        self.session, self.lean, self.top_k = session, lean, top_k
        # a graph that takes vocab_ids is always fed one (empty: the whole vocabulary, exactly as before); over a
        # subset its log_probs columns are the subset's, so the graph's TopK (cheap over a few thousand ids) ranks
        # for greedy too and its top_ids are vocabulary ids
        self.subset = vocab_ids if lean and vocab_ids is not None and len(vocab_ids) else None
        self.vocab_size = vocab_size
        if self.subset is not None and not has_vocab_ids(session):
            raise ValueError("a vocabulary subset needs a step graph that takes vocab_ids (export.cli shortlist)")
        takes_vocab = lean and has_vocab_ids(session)
        self._vocab_feed = {VOCAB_IDS: self.subset if self.subset is not None else np.zeros(0, np.int64)}
        if not takes_vocab:
            self._vocab_feed = {}
        # vocab_sources (sources, subset): the ids each source owns (Engine.vocab_owners), for a fused step that
        # takes them; its rows follow the sources the rows read (``_select``)
        owned = self.subset is not None and vocab_sources is not None and has_vocab_sources(session)
        self._owners = vocab_sources if owned else None
        metadata = session.get_modelmeta().custom_metadata_map if lean else {}
        # interface 2 and later: cross keys/values per source, rows grouped by source
        self.per_source = lean and step_interface(metadata) >= 2
        # interface 3: per-row positions, self-attention mask, query groups (a whole batch: all uniform)
        self.ragged = lean and step_interface(metadata) >= 3
        self.has_top_k = lean and "top_k" in {i.name for i in session.get_inputs()}
        # interface 2 runs TopK only when asked (top_k > 0); greedy takes numpy's argmax of log_probs instead.
        # A graph's two-stage top-k serves at most MAX_TOP_K_KEY candidates; beyond, numpy ranks log_probs
        max_top_k = int(metadata.get(MAX_TOP_K_KEY, 1 << 30))
        self.fetch_top = self.has_top_k and (top_k > 1 or not self.per_source) and top_k <= max_top_k
        if self.subset is not None:  # the subset's own TopK serves any top_k up to the subset's size
            self.fetch_top = top_k <= len(self.subset)
        width = len(self.subset) if self.subset is not None else vocab_size
        if metadata.get(FUSED_STEP_KEY) == "1" and self.has_top_k:  # the fused step ranks at any k (core/graphs.py)
            self.fetch_top, max_top_k = top_k <= width, width
        self._top_k_input = np.array([top_k if self.fetch_top else 0], dtype=np.int64)
        # the most candidates the graph's TopK serves (``widen``)
        self._top_k_limit = min(max_top_k, len(self.subset)) if self.subset is not None else max_top_k
        self.fetch_full = False  # with fetch_top: the full log_probs too (TopCandidates.full), set before a step
        self._fetch: list[str] | None = None
        self._reorder = ReorderBuffers()
        self._sources = (cross_keys, cross_values, src_mask)
        self._selected: np.ndarray | None = None  # the row_sources the cross keys/values were selected for
        n_sources = cross_keys.shape[1]
        self.row_sources = np.arange(n_sources) if row_sources is None else np.asarray(row_sources)
        self._select(self.row_sources)
        self.cache = KV_CACHE if lean else decoder_cache([i.name for i in session.get_inputs()])
        self.length = 0  # tokens fed so far
        keys, values = empty_cache(self.cache, cross_keys, len(self.row_sources))
        self.past_keys: np.ndarray | list[np.ndarray] = list(keys) if lean else keys
        self.past_values: np.ndarray | list[np.ndarray] = list(values) if lean else values

    def widen(self, extra: int) -> bool:
        """The next steps' graph TopK returns ``top_k + extra`` candidates per row (0: back to ``top_k``); False,
        changing nothing, when the graph serves fewer."""
        count = self.top_k + extra
        if not self.fetch_top or count > self._top_k_limit:
            return False
        self._top_k_input = np.array([count], dtype=np.int64)
        return True

    def _select(self, row_sources: np.ndarray) -> None:
        """Cross keys/values and mask of the sources the rows read (per row, or per source for interface 2)."""
        if self._selected is not None and np.array_equal(row_sources, self._selected):
            return  # the same sources in the same groups (beams traded places within their sentences)
        self._selected = row_sources
        wanted = row_sources
        if self.per_source:
            wanted = row_sources[np.r_[True, row_sources[1:] != row_sources[:-1]]]  # first row of each group
            if not np.array_equal(row_sources, np.repeat(wanted, len(row_sources) // len(wanted))):
                raise RuntimeError("decoder_step rows must be grouped by source, the same number per source")
        keys, values, mask = self._sources
        if np.array_equal(wanted, np.arange(keys.shape[1])):
            self.cross_keys, self.cross_values, self.src_mask = keys, values, mask
        else:  # np.take keeps the result C-contiguous (a[:, rows] does not)
            self.cross_keys, self.cross_values = np.take(keys, wanted, axis=1), np.take(values, wanted, axis=1)
            self.src_mask = mask[wanted]
        if self._owners is not None and self.per_source:
            self._vocab_feed[VOCAB_SOURCES] = self._owners[wanted]

    def step(self, tokens: np.ndarray, rows: np.ndarray | None) -> np.ndarray | TopCandidates:
        if rows is not None and np.array_equal(rows, np.arange(len(self.row_sources))):
            rows = None  # every row stays where it is: no cache gather
        if rows is not None:
            self.row_sources = self.row_sources[rows]
            self._select(self.row_sources)
            if self.lean:
                self.past_keys = [self._reorder.take(k, rows, ("k", i)) for i, k in enumerate(self.past_keys)]
                self.past_values = [self._reorder.take(v, rows, ("v", i)) for i, v in enumerate(self.past_values)]
            else:
                self.past_keys = np.take(self.past_keys, rows, axis=1)
                self.past_values = np.take(self.past_values, rows, axis=1)
        length, self.length = self.length, self.length + tokens.shape[1]
        if self.lean:
            return self._lean_step(tokens)
        log_probs, self.past_keys, self.past_values = self.session.run(
            decoder_outputs(self.cache)[:3],
            {
                "tokens": tokens,
                "src_mask": self.src_mask,
                "cross_keys": self.cross_keys,
                "cross_values": self.cross_values,
                **decoder_feeds(self.cache, (self.past_keys, self.past_values), length),
            },
        )
        return log_probs[:, -1]

    def _lean_step(self, tokens: np.ndarray) -> np.ndarray | TopCandidates:
        n_layers = len(self.past_keys)
        if self._fetch is None:
            presents = step_present_names(n_layers)
            self._fetch = ["top_log_probs", "top_ids", *presents] if self.fetch_top else ["log_probs", *presents]
            if self.fetch_top and self.fetch_full:
                self._fetch.append("log_probs")
        feeds = {"tokens": tokens, "src_mask": self.src_mask, **self._vocab_feed}
        if self.has_top_k:
            feeds["top_k"] = self._top_k_input
        if self.ragged:
            feeds.update(uniform_inputs(len(tokens), len(self.src_mask), self.past_keys[0].shape[2]))
        for i in range(n_layers):
            feeds[f"cross_keys_{i}"], feeds[f"cross_values_{i}"] = self.cross_keys[i], self.cross_values[i]
            feeds[f"past_keys_{i}"], feeds[f"past_values_{i}"] = self.past_keys[i], self.past_values[i]
        outputs = self.session.run(self._fetch, feeds)
        if not self.fetch_top:
            self.past_keys, self.past_values = outputs[1::2], outputs[2::2]
            return self._full(outputs[0])  # (rows, vocab)
        if self.fetch_full:
            presents, full = outputs[2:-1], self._full(outputs[-1])
            self.past_keys, self.past_values = presents[0::2], presents[1::2]
            return TopCandidates(outputs[0], outputs[1], full)
        self.past_keys, self.past_values = outputs[2::2], outputs[3::2]
        return TopCandidates(outputs[0], outputs[1])  # (rows, top_k) each, best first

    def _full(self, log_probs: np.ndarray) -> np.ndarray:
        """(rows, vocab) log-probabilities from a step's output: as it is, or a subset's columns put at their ids
        (-inf elsewhere: ids outside the subset are never chosen)."""
        if self.subset is None:
            return log_probs
        full = np.full((len(log_probs), self.vocab_size), -np.inf, dtype=np.float32)
        full[:, self.subset] = log_probs
        return full
