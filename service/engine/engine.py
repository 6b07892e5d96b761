"""The engine: a bundle's tokenizer and ONNX sessions, and what the service asks of them.

translate (greedy / beam, n-best, scores, optional cross-attention), embed (pooled encoder states),
attention (encoder, decoder and cross attention for a source and a given or generated target).
Testable without HTTP and without torch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from core.bundle import Bundle
from core.directions import normalization_language
from core.graphs import (
    ENCODER_OUTPUTS,
    FUSED_STEP_KEY,
    KV_CACHE,
    MAX_TOP_K_KEY,
    SEARCH_LOOP,
    VOCAB_IDS,
    decoder_cache,
    decoder_outputs,
    has_vocab_ids,
    step_graph_keys,
    step_interface,
    step_present_names,
)
from core.normalize import fold_unknown, source_normalizer
from core.search import Hypothesis, LengthPenalty, length_limits
from core.shortlist import Shortlist, load_shortlist
from core.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from service.engine.constrained import Constraint, constrained_beam_search, constrained_beam_size
from service.engine.constrained_greedy import GREEDY_TERM_TOP_K, constrained_greedy_search
from service.engine.decoder_cache import decoder_feeds, empty_cache
from service.engine.device_state import GATHER_GRAPH, DeviceRunner, device_search, wants_device_search
from service.engine.fused_step import auto_blocker, fused_loop_session, fused_search_session, fused_step_session
from service.engine.no_repeat import NoRepeatNgram
from service.engine.own_words import banned_per_sentence, banning, own_word_ids
from service.engine.reorder import ReorderBuffers
from service.engine.runtime import create_session
from service.engine.search import TopCandidates, beam_search, greedy_search
from service.engine.search_loop import SearchLoop
from service.engine.shared_tables import SharedTables
from service.engine.step_inputs import uniform_inputs

log = logging.getLogger(__name__)


class SourceTooLongError(ValueError):
    """Text ``index`` has ``n_tokens`` subwords (EOS excluded), more than ``limit``."""

    def __init__(self, index: int, n_tokens: int, limit: int) -> None:
        super().__init__(f"text has {n_tokens} subword tokens; the limit is {limit}: shorten or split it")
        self.index, self.n_tokens, self.limit = index, n_tokens, limit


@dataclass(frozen=True)
class TranslateOptions:
    """Decoding options of a translation; frozen, as the scheduler batches by equal options."""

    # None (a request that leaves it out): the bundle's default (``Engine.resolved``: its manifest's "decoding", an
    # imported checkpoint's num_beams; DEFAULT_BEAM when it has none), at least num_hypotheses
    beam_size: int | None = 1
    # generated tokens; None: the bundle's default (an imported checkpoint's max_length), else 2 * source tokens + 10
    max_length: int | None = None
    num_hypotheses: int = 1
    length_penalty: float = 0.6
    return_attention: bool = False
    constrained: bool = False  # its sources carry constraints: whole batches only (no live decode)
    # > 0: no n-gram of this size twice in a hypothesis (service/engine/no_repeat.py; every search but the constrained
    # ones: not applied to sentences with constraints). 0: off. None: the bundle's default (``Engine.resolved``: its
    # manifest's "decoding", 0 when it has none)
    no_repeat_ngram_size: int | None = None


@dataclass
class Translation:
    text: str
    score: float
    token_ids: list[int]
    source_ids: list[int]  # EOS included
    hypotheses: list[tuple[str, float, list[int]]] = field(default_factory=list)  # (text, score, ids), best first
    attention: np.ndarray | None = None  # cross-attention (layers, heads, target, source)
    truncated: bool = False  # stopped at its length limit without EOS (set by the serving layer, which knows it)
    missing: list = field(default_factory=list)  # glossary terms / spans it lacks (service/serving/terms.py Use)
    # decoded under glossary / do-not-translate constraints: its score holds forced subwords (set by the serving layer)
    constrained: bool = False


def _guarded(state: _DecoderState, options: TranslateOptions):
    """The state's step, wrapped to ban repeated n-grams when the options ask (service/engine/no_repeat.py)."""
    if not options.no_repeat_ngram_size:
        return state.step
    if state.fetch_top:  # the guard asks the graph's TopK for as many more candidates as a row has banned tokens
        return NoRepeatNgram(state.step, options.no_repeat_ngram_size, widen=state.widen)
    return NoRepeatNgram(state.step, options.no_repeat_ngram_size)  # every log-probability comes anyway


DEFAULT_BEAM = 4  # the beam of a request that leaves it out, when the bundle names none (/v1's default)


def decoding_defaults(manifest: dict) -> dict:
    """A bundle's defaults of the decoding options a request leaves None: its manifest's "decoding" (written by
    ``python -m export.cli decoding``; an imported checkpoint's ``beam_size`` and ``max_length`` by ``import-hf``)
    over the engine's own (no n-gram block)."""
    return {"no_repeat_ngram_size": 0, **manifest.get("decoding", {})}


def pad_batch(sequences: Sequence[Sequence[int]]) -> np.ndarray:
    width = max(len(s) for s in sequences)
    out = np.full((len(sequences), width), PAD_ID, dtype=np.int64)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = s
    return out


class _DecoderState:
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


class Engine:
    def __init__(
        self,
        bundle: Bundle,
        variant: str | None = None,
        providers: str = "auto",
        intra_op_threads: int = 1,
        inter_op_threads: int = 1,
        lean_decoder: bool = True,
        io_binding: bool | None = None,
        shared_arena: bool = True,
        shortlist: bool = True,
        search_loop: bool = True,
        shared_tables: bool = True,
        memory_pattern: bool = True,
        prepack: bool = True,
        fused_step: bool | str = False,
    ) -> None:
        """``io_binding``: search with the cache on the device (service/engine/device_state.py); None = when the
        sessions run on CUDA and the bundle's step graph allows it (interface 3), True = on any provider.
        ``shared_arena``: CPU sessions allocate from the process's one onnxruntime arena (runtime.py).
        ``shortlist``: search over the bundle's lexical shortlist (core/shortlist.py) when it has one and its step
        graphs take vocab_ids; requests that need the whole vocabulary still get it (``vocab_subset``).
        ``search_loop``: a lone sentence's greedy or beam search runs in the bundle's ``decoder_loop`` graph (one
        session call, service/engine/search_loop.py) when it has one; same hypotheses as the step-by-step search.
        ``shared_tables``: the CPU sessions read the embedding from one memory map (service/engine/shared_tables.py)
        instead of one each. ``memory_pattern``, ``prepack``: onnxruntime's session options of those names
        (runtime.py ``create_session``). ``fused_step``: whole-batch search runs the int8 step as one fused operator
        (fused_step.py) where the library is built and the bundle's graph is one it computes; "auto" only where the
        CPU has AVX-512 VNNI too (fused_step.py ``auto_blocker``), and says why not at INFO, not WARNING ("true" /
        "false" as the booleans); ``self.fused_step`` says what runs ("fused", "off", or why not)."""
        self.bundle = bundle
        self.variant = variant or bundle.default_variant
        self.decoding = decoding_defaults(bundle.manifest)  # for options left None
        self.config = bundle.model_config
        self.tokenizer = Tokenizer(bundle.tokenizer_file)
        # target-language text (glossary terms, a given target) is cut by the target side's model where the bundle
        # has one (imported models: export/marian_vocab.py); the ids and pieces are the same vocabulary's
        target = bundle.target_tokenizer_file
        self.target_tokenizer = self.tokenizer if target == bundle.tokenizer_file else Tokenizer(target)
        rules = bundle.manifest.get("source_normalization")
        normalizer = source_normalizer(rules, normalization_language(bundle.manifest))
        # then the characters the vocabulary lacks as equivalents it has (typographic quotes, dashes, full-width
        # forms: core/normalize.py fold_unknown), for every bundle
        self.normalize_source = lambda text: fold_unknown(normalizer(text), self.tokenizer.spelled_in_bytes)
        settings = {
            "intra_op_threads": intra_op_threads,
            "inter_op_threads": inter_op_threads,
            "shared_arena": shared_arena,
            "tables": SharedTables() if shared_tables else None,
            "memory_pattern": memory_pattern,
            "prepack": prepack,
        }
        self.encoder = create_session(bundle.graph(self.variant, "encoder"), providers, **settings)
        # search runs on the lean step graphs when the bundle has them (bundles exported before they existed fall
        # back to decoder.onnx); decoder.onnx serves attention and teacher forcing, and is then loaded on first use
        # (21-32 MiB less resident memory for translate-only work). The one choice of step graphs: whole-batch
        # search's (``step_decoder``, created now) and the live decode's (``live_step``), which are one graph in
        # bundles of one step graph and two in bundles that carry both (core/graphs.py step_graph_keys); a
        # second graph's session is created on first use (the live decode's start), so an engine that only runs
        # whole batches holds one step session
        self._session_args = (providers, settings)
        self.tables: SharedTables | None = settings["tables"]  # the sessions' shared lookup tables (None: their own)
        self._decoder = None
        self._decoder_lock = threading.Lock()
        self.step_decoder = None
        self._live_step = None
        self._live_step_key: str | None = None
        steps = step_graph_keys(bundle.manifest["variants"][self.variant]) if lean_decoder else None
        self.fused_step = "off"
        if steps is not None:
            batch, live = steps
            auto = fused_step == "auto"
            blocker = auto_blocker() if auto else None
            if blocker is not None:
                self.fused_step = blocker
                # the usual case on a CPU without VNNI or a build without `make native`; GET /v1/models says why
                log.debug("%s %s: fused step not used (MT_FUSED_STEP=auto): %s", bundle.name, self.variant, blocker)
            elif fused_step in (True, "true", "auto"):
                self.step_decoder, self.fused_step = fused_step_session(
                    bundle.graph(self.variant, batch), providers, settings
                )
                if self.step_decoder is None:
                    (log.info if auto else log.warning)(
                        "%s %s: fused step not used: %s", bundle.name, self.variant, self.fused_step
                    )
                else:
                    log.info("%s %s: whole-batch search on the fused step", bundle.name, self.variant)
            if self.step_decoder is None:
                self.step_decoder = create_session(bundle.graph(self.variant, batch), providers, **settings)
            self._live_step_key = None if live == batch else live
        else:
            self._decoder = create_session(bundle.graph(self.variant, "decoder"), providers, **settings)
        self.providers = self.encoder.get_providers()
        self.max_source_tokens = int(self.config["max_positions"])  # EOS included
        self.vocab_size = int(self.config["vocab_size"])
        self.device_runner: DeviceRunner | None = None
        self._after_term: np.ndarray | None = None
        # greedy requests with terms: "row" = one decoder row per sentence (constrained_greedy.py), "beam" = the
        # constrained beam search of constraints + 1 rows (constrained.py); a knob for measuring one against the other
        self.greedy_terms = "row"
        self.greedy_term_top_k = GREEDY_TERM_TOP_K
        if io_binding is None:
            io_binding = wants_device_search(self.providers, self.step_decoder)
        if io_binding:
            gather = create_session(GATHER_GRAPH, providers, **settings)
            self.device_runner = DeviceRunner(self.encoder, self.step_decoder, gather)
        self._search_loop: SearchLoop | None = None
        variant_graphs = bundle.manifest["variants"][self.variant]
        self._search_loop_key = SEARCH_LOOP if search_loop and lean_decoder and SEARCH_LOOP in variant_graphs else None
        self.shortlist: Shortlist | None = None
        entry = bundle.manifest.get("shortlist")
        usable = self.device_runner is None and self.step_decoder is not None and has_vocab_ids(self.step_decoder)
        if shortlist and entry and usable:  # the file is listed and hashed: load_bundle verified it
            self.shortlist = load_shortlist(bundle.path / entry["file"], self.vocab_size)

    def vocab_subset(self, sources: Sequence[Sequence[int]], options: TranslateOptions) -> np.ndarray | None:
        """The vocabulary ids a batch of ``sources`` searches over: the shortlist's union for them, or None (the
        whole vocabulary) without a shortlist and for requests that need it: n-best lists (their scores rank
        hypotheses against each other), attention (its scores must match the attention graph's) and constraints
        (their tokens need not be on the list)."""
        if self.shortlist is None or options.num_hypotheses > 1 or options.return_attention or options.constrained:
            return None
        return self.shortlist.vocab_ids(sources)

    @property
    def threads(self) -> dict[str, int]:
        """The thread counts the sessions really run with (read back from the encoder session)."""
        options = self.encoder.get_session_options()
        return {"intra_op": options.intra_op_num_threads, "inter_op": options.inter_op_num_threads}

    @property
    def decoder(self):
        """The decoder.onnx session (attention outputs, teacher forcing, search fallback), created on first use."""
        if self._decoder is None:
            with self._decoder_lock:
                if self._decoder is None:
                    providers, settings = self._session_args
                    self._decoder = create_session(self.bundle.graph(self.variant, "decoder"), providers, **settings)
        return self._decoder

    @decoder.setter
    def decoder(self, session) -> None:
        self._decoder = session

    @property
    def live_step(self):
        """The step session of the live decode (service/engine/live.py): the bundle's batch-invariant graph
        (``decoder_step``, interface 4 since issue 36) where whole-batch search has a graph of its own, created on
        first use; else ``step_decoder`` itself (None without a step graph)."""
        if self._live_step is None and self._live_step_key is None:
            return self.step_decoder
        if self._live_step is None:
            with self._decoder_lock:
                if self._live_step is None:
                    providers, settings = self._session_args
                    path = self.bundle.graph(self.variant, self._live_step_key)  # type: ignore[arg-type]
                    self._live_step = create_session(path, providers, **settings)
        return self._live_step

    @live_step.setter
    def live_step(self, session) -> None:
        """A session (or a wrapper of one: tests, benchmarks) the live decode runs from now on."""
        self._live_step = session

    @property
    def search_loop(self) -> SearchLoop | None:
        """The search loop of a lone sentence (the bundle's ``decoder_loop`` graph), created on first use; None when
        the bundle has none, it was turned off, or the search runs on the device (CUDA I/O binding)."""
        if self._search_loop_key is None or self.device_runner is not None:
            return None
        if self._search_loop is None:
            with self._decoder_lock:
                if self._search_loop is None:
                    providers, settings = self._session_args
                    path = self.bundle.graph(self.variant, self._search_loop_key)
                    session = None
                    if self.fused_step == "fused":  # the whole loop as one fused search, else its body fused
                        session, why = fused_search_session(path, providers, settings)
                        if session is None:
                            log.warning("%s: the search loop is not fused whole: %s", self.bundle.name, why)
                            session, why = fused_loop_session(path, providers, settings)
                        if session is None:
                            log.warning("%s: the search loop keeps its step graph: %s", self.bundle.name, why)
                    self._search_loop = SearchLoop(session or create_session(path, providers, **settings))
        return self._search_loop

    @property
    def step_graphs(self) -> dict[str, str]:
        """Which bundle graph each search path runs: {"batch": key, "live": key} (core/graphs.py STEP_GRAPHS), or
        {} when search runs on decoder.onnx."""
        steps = step_graph_keys(self.bundle.manifest["variants"][self.variant])
        if self.step_decoder is None or steps is None:
            return {}
        return {"batch": steps[0], "live": steps[1]}

    # --- tokens ------------------------------------------------------------------------------
    def source_ids(self, texts: Sequence[str], max_subwords: int | None = None) -> list[list[int]]:
        """Subword ids + EOS; raises SourceTooLongError naming the first text with more than ``max_subwords``
        subwords (EOS excluded; at most the model's limit, max_source_tokens - 1, which is also the default)."""
        return self._ids(self.tokenizer, texts, max_subwords)

    def target_ids(self, texts: Sequence[str], max_subwords: int | None = None) -> list[list[int]]:
        """As ``source_ids``, for target-language text (a given target): cut by the target tokenizer."""
        return self._ids(self.target_tokenizer, texts, max_subwords)

    def _ids(self, tokenizer: Tokenizer, texts: Sequence[str], max_subwords: int | None) -> list[list[int]]:
        limit = self.max_source_tokens - 1 if max_subwords is None else min(max_subwords, self.max_source_tokens - 1)
        ids = tokenizer.encode_batch([self.normalize_source(t) for t in texts])
        for i, seq in enumerate(ids):
            if len(seq) > limit:
                raise SourceTooLongError(i, len(seq), limit)
        return [seq + [EOS_ID] for seq in ids]

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return self.tokenizer.pieces(ids)

    # --- graphs ------------------------------------------------------------------------------
    def run_encoder(self, sources: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
        src = pad_batch(sources)
        outputs = dict(zip(ENCODER_OUTPUTS, self.encoder.run(ENCODER_OUTPUTS, {"src_ids": src}), strict=True))
        outputs["src_mask"] = src != PAD_ID
        return outputs

    def run_decoder_full(self, enc: dict[str, np.ndarray], targets: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
        """Teacher forcing: decoder inputs BOS + target for every sentence in one call (cache length 0)."""
        tokens = pad_batch([[BOS_ID, *t] for t in targets])
        cache = decoder_cache([i.name for i in self.decoder.get_inputs()])
        names = ["log_probs", "self_attention", "cross_attention"]
        feeds = {
            "tokens": tokens,
            "src_mask": enc["src_mask"],
            "cross_keys": enc["cross_keys"],
            "cross_values": enc["cross_values"],
            **decoder_feeds(cache, empty_cache(cache, enc["cross_keys"], len(tokens)), 0),
        }
        return dict(zip(names, self.decoder.run(names, feeds), strict=True))

    # --- translate ---------------------------------------------------------------------------
    def penalty(self, options: TranslateOptions) -> LengthPenalty:
        """The options' length penalty in the bundle's form (``decoding.length_penalty_form``; GNMT's by default)."""
        return LengthPenalty(options.length_penalty, self.decoding.get("length_penalty_form", "gnmt"))

    def resolved(self, options: TranslateOptions) -> TranslateOptions:
        """``options`` with what it leaves None set to the bundle's decoding defaults (``self.decoding``): the
        n-gram block, the beam (at least num_hypotheses; DEFAULT_BEAM when the bundle names none) and the length
        limit (when the bundle names one)."""
        changes: dict = {}
        if options.no_repeat_ngram_size is None:
            changes["no_repeat_ngram_size"] = int(self.decoding["no_repeat_ngram_size"])
        if options.beam_size is None:
            changes["beam_size"] = max(int(self.decoding.get("beam_size", DEFAULT_BEAM)), options.num_hypotheses)
        if options.max_length is None and self.decoding.get("max_length") is not None:
            changes["max_length"] = int(self.decoding["max_length"])
        return replace(options, **changes) if changes else options

    def translate(
        self,
        texts: Sequence[str],
        options: TranslateOptions | None = None,
        constraints: Sequence[Sequence[Constraint]] | None = None,
    ) -> list[Translation]:
        return self.translate_ids(self.source_ids(texts), options, constraints=constraints)

    def translate_ids(
        self,
        sources: list[list[int]],
        options: TranslateOptions | None = None,
        stats: dict[str, float] | None = None,
        constraints: Sequence[Sequence[Constraint]] | None = None,
    ) -> list[Translation]:
        """``stats``, when given, receives encode / decode seconds and generated_tokens of this call.
        ``constraints``: per source, target token sequences its translation must hold (service/engine/constrained.py);
        sources with constraints decode with the constrained beam search, the others as usual."""
        options = self.resolved(options or TranslateOptions())
        if constraints is not None and any(constraints):
            return self._translate_constrained(sources, options, stats, [list(c) for c in constraints])
        stats = stats if stats is not None else {}
        results: list[Translation | None] = [None] * len(sources)
        work = [i for i, s in enumerate(sources) if len(s) > 1]  # an empty text translates to an empty text
        for i, s in enumerate(sources):
            if len(s) <= 1:
                results[i] = self.empty_translation(s, options)
        if work:
            for i, nbest in zip(work, self._search([sources[i] for i in work], options, stats), strict=True):
                results[i] = self.translation(sources[i], nbest)
                stats["generated_tokens"] = stats.get("generated_tokens", 0) + sum(len(h.tokens) + 1 for h in nbest)
            if options.return_attention:
                started = time.perf_counter()
                self.attach_attention([results[i] for i in work])
                stats["decode"] = stats.get("decode", 0.0) + time.perf_counter() - started
        return results  # type: ignore[return-value]

    def _translate_constrained(
        self,
        sources: list[list[int]],
        options: TranslateOptions,
        stats: dict[str, float] | None,
        constraints: list[list[Constraint]],
    ) -> list[Translation]:
        """The free sources as usual, the constrained ones (non-empty) through the constrained search: greedy ones
        on one row each (constrained_greedy.py), the others with the constrained beam search (constrained.py)."""
        stats = stats if stats is not None else {}
        free = [i for i, c in enumerate(constraints) if not c or len(sources[i]) <= 1]
        bound = [i for i, c in enumerate(constraints) if c and len(sources[i]) > 1]
        results: list[Translation | None] = [None] * len(sources)
        if free:
            for i, t in zip(free, self.translate_ids([sources[i] for i in free], options, stats), strict=True):
                results[i] = t
        started = time.perf_counter()
        enc = self.run_encoder([sources[i] for i in bound])
        stats["encode"] = stats.get("encode", 0.0) + time.perf_counter() - started
        started = time.perf_counter()
        cons = [constraints[i] for i in bound]
        banned = self.own_words(cons)
        limits = length_limits([len(sources[i]) for i in bound], self.max_source_tokens, options.max_length)
        if options.beam_size == 1 and options.num_hypotheses == 1 and self.greedy_terms == "row":
            found = self._constrained_greedy([sources[i] for i in bound], enc, limits, cons, options, banned)
        else:
            found = self._constrained_beam(enc, limits, cons, options, banned)
        stats["decode"] = stats.get("decode", 0.0) + time.perf_counter() - started
        for i, nbest in zip(bound, found, strict=True):
            results[i] = self.translation(sources[i], nbest)
            stats["generated_tokens"] = stats.get("generated_tokens", 0) + sum(len(h.tokens) + 1 for h in nbest)
        if options.return_attention:
            self.attach_attention([results[i] for i in bound])
        return results  # type: ignore[return-value]

    def _constrained_beam(
        self,
        enc: dict[str, np.ndarray],
        limits: list[int],
        cons: list[list[Constraint]],
        options: TranslateOptions,
        banned: dict[int, np.ndarray] | None = None,
    ) -> list[list[Hypothesis]]:
        """The constrained beam search (constrained.py) of encoded sources with their constraints; ``banned``: each
        source's subwords the search may not choose (own_words)."""
        k = constrained_beam_size(options.beam_size, cons)
        session, lean = (self.step_decoder, True) if self.step_decoder is not None else (self.decoder, False)
        rows = np.repeat(np.arange(len(cons)), k)
        state = _DecoderState(
            session, enc["cross_keys"], enc["cross_values"], enc["src_mask"], lean, row_sources=rows, top_k=2 * k
        )
        state.fetch_full = True  # the constraint tokens' log-probabilities are read beside the graph's 2k best
        return constrained_beam_search(
            banning(state.step, lambda: state.row_sources, banned or {}),
            limits,
            BOS_ID,
            EOS_ID,
            k,
            self.penalty(options),
            min(options.num_hypotheses, k),
            cons,
            self.max_source_tokens - 1,
            self.after_term(),
        )

    def _constrained_greedy(
        self,
        sources: list[list[int]],
        enc: dict[str, np.ndarray],
        limits: list[int],
        cons: list[list[Constraint]],
        options: TranslateOptions,
        banned: dict[int, np.ndarray] | None = None,
    ) -> list[list[Hypothesis]]:
        """Greedy sentences with constraints, one decoder row each (constrained_greedy.py): a first pass; the
        sentences it leaves stuck again, each constraint started where the first pass came closest to it; what is
        still stuck (rare: a planned start taken by another term) through the constrained beam search."""
        session, lean = (self.step_decoder, True) if self.step_decoder is not None else (self.decoder, False)
        found: list[list[Hypothesis]] = [[] for _ in sources]
        todo, plans = list(range(len(sources))), None
        for _ in range(2):  # the second pass reads the same encoder outputs, of the stuck sources only
            row_sources = np.asarray(todo, dtype=np.int64)
            state = _DecoderState(
                session, enc["cross_keys"], enc["cross_values"], enc["src_mask"], lean, row_sources=row_sources
            )
            hyps, stuck = constrained_greedy_search(
                banning(state.step, lambda state=state: state.row_sources, banned or {}),
                [limits[j] for j in todo],
                BOS_ID,
                EOS_ID,
                [cons[j] for j in todo],
                self.max_source_tokens - 1,
                self.after_term(),
                self.greedy_term_top_k,
                fallback=True,
                plans=plans,
            )
            for p, h in enumerate(hyps):
                if p not in stuck:
                    found[todo[p]] = [h]
            if not stuck:
                return found
            plans = [stuck[p] for p in sorted(stuck)]
            todo = [todo[p] for p in sorted(stuck)]
        enc = self.run_encoder([sources[j] for j in todo])
        subset = {p: (banned or {})[j] for p, j in enumerate(todo) if j in (banned or {})}
        beams = self._constrained_beam(enc, [limits[j] for j in todo], [cons[j] for j in todo], options, subset)
        for j, nbest in zip(todo, beams, strict=True):
            found[j] = nbest
        return found

    def own_words(self, cons: list[list[Constraint]]) -> dict[int, np.ndarray]:
        """Per constrained sentence, the model's own word for its glossary terms' source words (each translated alone,
        greedy): banned from its search so that the term takes that word's place (service/engine/own_words.py)."""
        words = sorted({c.source for sentence in cons for c in sentence if c.source})
        if not words:
            return {}
        own = self.translate_ids(self.source_ids(words), TranslateOptions(beam_size=1))
        encode = self.tokenizer.encode
        return banned_per_sentence(cons, {w: own_word_ids(t.text, encode) for w, t in zip(words, own, strict=True)})

    def after_term(self) -> np.ndarray:
        """(vocab,) bool: tokens that may follow a glossary term or span (constrained.py): a piece that begins a
        word ("▁..."), one without letters or digits (punctuation), EOS, or an English inflection ("s", "es",
        "'s"). Computed once."""
        if self._after_term is None:
            pieces = self.tokenizer.pieces(range(self.tokenizer.vocab_size))
            allowed = [
                p.startswith("\u2581") or not any(c.isalnum() for c in p) or p in ("s", "es", "'s") for p in pieces
            ]
            allowed[EOS_ID] = True
            self._after_term = np.asarray(allowed, dtype=bool)
        return self._after_term

    @staticmethod
    def empty_translation(source: Sequence[int], options: TranslateOptions) -> Translation:
        """An empty text (EOS alone) translates to an empty text."""
        return Translation("", 0.0, [], list(source), [("", 0.0, [])] if options.num_hypotheses > 1 else [])

    def translation(self, source: list[int], nbest: list[Hypothesis]) -> Translation:
        """The answer of one sentence from its n-best hypotheses, best first."""
        best = nbest[0]
        hyps = [(self.tokenizer.decode(h.tokens), h.score, h.tokens) for h in nbest]
        return Translation(hyps[0][0], best.score, best.tokens, source, hyps if len(hyps) > 1 else [])

    def _search(
        self, sources: list[list[int]], options: TranslateOptions, stats: dict[str, float]
    ) -> list[list[Hypothesis]]:
        if self.device_runner is not None and not options.no_repeat_ngram_size:  # encoder outputs, cache on the device
            limits = length_limits([len(s) for s in sources], self.max_source_tokens, options.max_length)
            return device_search(self.device_runner, pad_batch(sources), limits, options, stats, self.penalty(options))
        started = time.perf_counter()
        enc = self.run_encoder(sources)
        stats["encode"] = stats.get("encode", 0.0) + time.perf_counter() - started
        started = time.perf_counter()
        try:
            return self._decode(enc, sources, options)
        finally:
            stats["decode"] = stats.get("decode", 0.0) + time.perf_counter() - started

    def _decode(
        self, enc: dict[str, np.ndarray], sources: list[list[int]], options: TranslateOptions
    ) -> list[list[Hypothesis]]:
        limits = length_limits([len(s) for s in sources], self.max_source_tokens, options.max_length)
        k = options.beam_size
        session, lean = (self.step_decoder, True) if self.step_decoder is not None else (self.decoder, False)
        vocab = {"vocab_ids": self.vocab_subset(sources, options) if lean else None, "vocab_size": self.vocab_size}
        block = options.no_repeat_ngram_size
        loop = self.search_loop if lean else None
        if loop is not None and (len(sources) == 1 or loop.batched) and loop.serves(k, vocab["vocab_ids"]):
            args = (k, self.penalty(options), options.num_hypotheses, vocab["vocab_ids"], block or 0)
            # the fused search takes the whole batch in one call, each source as it would be alone
            found = loop.search_batch(enc, limits, *args) if loop.batched else [loop.search(enc, limits[0], *args)]
            # with the block: None when the unblocked search took a token the block bans; searched again step by
            # step with the block (search_loop.py says why the other answers are the blocked search's own)
            again = [i for i, hypotheses in enumerate(found) if hypotheses is None]
            if again:
                some = {name: enc[name][:, again] for name in ("cross_keys", "cross_values")}
                some["src_mask"] = enc["src_mask"][again]
                redone = self._step_search(some, [limits[i] for i in again], options, session, lean, vocab)
                for i, hypotheses in zip(again, redone, strict=True):
                    found[i] = hypotheses
            return found
        return self._step_search(enc, limits, options, session, lean, vocab)

    def _step_search(
        self, enc: dict[str, np.ndarray], limits: list[int], options: TranslateOptions, session, lean: bool, vocab
    ) -> list[list[Hypothesis]]:
        """The search step by step in Python (service/engine/search.py), one step session call per step."""
        k = options.beam_size
        keys, values, mask = enc["cross_keys"], enc["cross_values"], enc["src_mask"]
        if k == 1:
            state = _DecoderState(session, keys, values, mask, lean, **vocab)
            return [[h] for h in greedy_search(_guarded(state, options), limits, BOS_ID, EOS_ID)]
        rows = np.repeat(np.arange(len(limits)), k)
        state = _DecoderState(session, keys, values, mask, lean, row_sources=rows, top_k=2 * k, **vocab)
        step = _guarded(state, options)
        return beam_search(step, limits, BOS_ID, EOS_ID, k, self.penalty(options), options.num_hypotheses)

    def attach_attention(self, results: list[Translation]) -> None:
        """Cross-attention of each best hypothesis: row j is the step that generated token j."""
        enc = self.run_encoder([r.source_ids for r in results])
        dec = self.run_decoder_full(enc, [r.token_ids for r in results])
        for b, r in enumerate(results):
            r.attention = dec["cross_attention"][:, b, :, : len(r.token_ids), : len(r.source_ids)]

    # --- embeddings --------------------------------------------------------------------------
    def embed(self, texts: Sequence[str], pooling: str = "mean", normalize: bool = True) -> np.ndarray:
        """(texts, d_model) pooled encoder states over the non-pad positions (EOS included)."""
        return self.embed_ids(self.source_ids(texts), pooling, normalize)

    def embed_ids(
        self, sources: list[list[int]], pooling: str = "mean", normalize: bool = True, stats: dict | None = None
    ) -> np.ndarray:
        started = time.perf_counter()
        enc = self.run_encoder(sources)
        if stats is not None:
            stats["encode"] = time.perf_counter() - started
        states, mask = enc["encoder_output"].astype(np.float64), enc["src_mask"][..., None]
        if pooling == "mean":
            pooled = (states * mask).sum(axis=1) / mask.sum(axis=1)
        elif pooling == "max":
            pooled = np.where(mask, states, -np.inf).max(axis=1)
        else:
            raise ValueError(f"pooling must be 'mean' or 'max', got {pooling!r}")
        if normalize:
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled.astype(np.float32)

    # --- attention ---------------------------------------------------------------------------
    def attention(self, source: str, target: str | None = None) -> dict[str, object]:
        src_ids = self.source_ids([source])[0]
        tgt_ids = None if target is None else self.target_tokenizer.encode(target)[: self.max_source_tokens - 1]
        return self.attention_ids(src_ids, tgt_ids)

    def search_score(self, enc: dict[str, np.ndarray], tgt_ids: list[int]) -> float | None:
        """Score of ``tgt_ids`` + EOS (one source in ``enc``) from the graph search runs on, stepped token by token
        and summed as the search sums (float32 log-probabilities, float64 sum): the score /v1/translate reports
        for the same target. None when search runs on decoder.onnx or the step graph gives only its top tokens."""
        if self.step_decoder is None:
            return None
        state = _DecoderState(self.step_decoder, enc["cross_keys"], enc["cross_values"], enc["src_mask"], lean=True)
        last, total = BOS_ID, 0.0
        for token in [*tgt_ids, EOS_ID]:
            out = state.step(np.full((1, 1), last, dtype=np.int64), None)
            if isinstance(out, TopCandidates):
                return None
            total += float(out[0, token])
            last = token
        return total

    def attention_ids(self, src_ids: list[int], tgt_ids: list[int] | None = None) -> dict[str, object]:
        """Encoder [L][H][src][src], decoder [L][H][tgt][tgt] and cross [L][H][tgt][src] attention.

        Target rows are the decoder inputs: <s> followed by the target's subwords (the model's own
        greedy translation when no target is given); row i is the step that predicts the token after it.
        """
        if tgt_ids is None:
            tgt_ids = self.translate_ids([src_ids])[0].token_ids
        enc = self.run_encoder([src_ids])
        dec = self.run_decoder_full(enc, [tgt_ids])
        score = self.search_score(enc, tgt_ids)
        if score is None:  # no step graph that gives full log-probabilities: the attention graph's own score
            log_probs = dec["log_probs"][0]
            score = float(sum(float(log_probs[i, t]) for i, t in enumerate([*tgt_ids, EOS_ID])))
        return {
            "source_tokens": self.pieces(src_ids),
            "target_tokens": self.pieces([BOS_ID, *tgt_ids]),
            "target_ids": tgt_ids,
            "target_text": self.tokenizer.decode(tgt_ids),
            "score": score,
            "encoder": enc["encoder_attention"][:, 0],
            "decoder": dec["self_attention"][:, 0],
            "cross": dec["cross_attention"][:, 0],
        }


def alignment(cross: np.ndarray, n_source_words: int | None = None) -> list[tuple[int, int]]:
    """[source_index, target_index] pairs: each target token's argmax over the head- and layer-mean attention.

    cross: (layers, heads, target, source) where the last source position is EOS; EOS is never aligned.
    """
    mean = cross.mean(axis=(0, 1))  # (target, source)
    usable = mean[:, : n_source_words if n_source_words is not None else mean.shape[1] - 1]
    if usable.shape[1] == 0:
        return []
    return [(int(np.argmax(row)), j) for j, row in enumerate(usable)]
