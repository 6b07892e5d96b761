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

import numpy as np

from core.bundle import Bundle
from core.graphs import (
    ENCODER_OUTPUTS,
    SEARCH_LOOP,
    decoder_cache,
    has_vocab_ids,
    has_vocab_sources,
    step_graph_keys,
)
from core.search import Hypothesis, LengthPenalty, length_limits
from core.shortlist import Shortlist, load_shortlist
from core.tokenizer import BOS_ID, EOS_ID, Tokenizer, source_mask
from engine.bundle_text import bundle_text
from engine.chooser import Search, choose
from engine.constrained import Constraint
from engine.constrained_greedy import GREEDY_TERM_TOP_K
from engine.constrained_search import translate_constrained
from engine.decoder_cache import decoder_feeds, empty_cache
from engine.decoder_state import DecoderState, guarded, pad_batch
from engine.decoding import DecodingDefaults, TranslateOptions, decoding_defaults
from engine.device_state import GATHER_GRAPH, DeviceRunner, device_search, wants_device_search
from engine.fused_step import batch_step_session, fused_loop_session, fused_search_session
from engine.runtime import create_session
from engine.search import TopCandidates, beam_search, greedy_search
from engine.search_loop import SearchLoop
from engine.shared_tables import SharedTables
from engine.translation import SourceTooLongError, Translation

log = logging.getLogger(__name__)


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
        """``io_binding``: search with the cache on the device (engine/device_state.py); None = when the
        sessions run on CUDA and the bundle's step graph allows it (interface 3), True = on any provider.
        ``shared_arena``: CPU sessions allocate from the process's one onnxruntime arena (runtime.py).
        ``shortlist``: search over the bundle's lexical shortlist (core/shortlist.py) when it has one and its step
        graphs take vocab_ids; requests that need the whole vocabulary still get it (``vocab_subset``).
        ``search_loop``: a lone sentence's greedy or beam search runs in the bundle's ``decoder_loop`` graph (one
        session call, engine/search_loop.py) when it has one; same hypotheses as the step-by-step search.
        ``shared_tables``: the CPU sessions read the embedding from one memory map (engine/shared_tables.py)
        instead of one each. ``memory_pattern``, ``prepack``: onnxruntime's session options of those names
        (runtime.py ``create_session``). ``fused_step``: whole-batch search runs the int8 step as one fused operator
        (fused_step.py) where the library is built and the bundle's graph is one it computes; "auto" only where the
        CPU has AVX-512 VNNI or AVX2 with FMA too (fused_step.py ``auto_blocker``), and says why not at INFO, not
        WARNING ("true" / "false" as the booleans); ``self.fused_step`` says what runs ("fused", "off", or why not)."""
        self.bundle = bundle
        self.variant = variant or bundle.default_variant
        self.decoding = decoding_defaults(bundle.manifest)  # the manifest's, as GET /v1/models shows them
        self.defaults = DecodingDefaults.of(self.decoding)  # for options left None (TranslateOptions.resolve)
        self.config = bundle.model_config
        self.tokenizer, self.target_tokenizer, self.normalize_source = bundle_text(bundle)
        settings = {
            "intra_op_threads": intra_op_threads,
            "inter_op_threads": inter_op_threads,
            "shared_arena": shared_arena,
            "tables": SharedTables() if shared_tables else None,
            "memory_pattern": memory_pattern,
            "prepack": prepack,
        }
        self.encoder = create_session(bundle.graph(self.variant, "encoder"), providers, **settings)
        self._open_decoders(bundle, lean_decoder, fused_step, providers, settings)
        self.providers = self.encoder.get_providers()
        self.max_source_tokens = int(self.config["max_positions"])  # EOS included
        self.source_eos = bool(self.config.get("source_eos", True))  # False: the source's EOS is masked (source_mask)
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
        self.shortlist = self._shortlist(bundle) if shortlist else None

    def _shortlist(self, bundle: Bundle) -> Shortlist | None:
        """The bundle's lexical shortlist, where it has one and the step graph takes vocab_ids (not on the device)."""
        entry = bundle.manifest.get("shortlist")
        usable = self.device_runner is None and self.step_decoder is not None and has_vocab_ids(self.step_decoder)
        if entry and usable:  # the file is listed and hashed: load_bundle verified it
            return load_shortlist(bundle.path / entry["file"], self.vocab_size)
        return None

    def _open_decoders(self, bundle: Bundle, lean_decoder: bool, fused_step: bool | str, providers, settings) -> None:
        """Search runs on the lean step graphs when the bundle has them (bundles exported before they existed fall
        back to decoder.onnx); decoder.onnx serves attention and teacher forcing, and is then loaded on first use
        (21-32 MiB less resident memory for translate-only work). The one choice of step graphs: whole-batch
        search's (``step_decoder``, created now: the fused step or the graph, fused_step.py ``batch_step_session``)
        and the live decode's (``live_step``), which are one graph in bundles of one step graph and two in bundles
        that carry both (core/graphs.py step_graph_keys); a second graph's session is created on first use (the live
        decode's start), so an engine that only runs whole batches holds one step session."""
        self._session_args = (providers, settings)
        self.tables: SharedTables | None = settings["tables"]  # the sessions' shared lookup tables (None: their own)
        self._decoder = None
        self._decoder_lock = threading.Lock()
        self.step_decoder = None
        self._live_step = None
        self._live_step_key: str | None = None
        steps = step_graph_keys(bundle.manifest["variants"][self.variant]) if lean_decoder else None
        self.fused_step = "off"
        if steps is None:
            self._decoder = create_session(bundle.graph(self.variant, "decoder"), providers, **settings)
            return
        batch, live = steps
        label = f"{bundle.name} {self.variant}"
        path = bundle.graph(self.variant, batch)
        self.step_decoder, self.fused_step = batch_step_session(path, fused_step, providers, settings, label)
        self._live_step_key = None if live == batch or self.fused_step == "fused" else live  # fused: one kernel (#56)

    def vocab_subset(self, sources: Sequence[Sequence[int]], options: TranslateOptions) -> np.ndarray | None:
        """The vocabulary ids a batch of ``sources`` searches over: the shortlist's union for them, or None (the
        whole vocabulary) without a shortlist and for requests that need it: n-best lists (their scores rank
        hypotheses against each other), attention (its scores must match the attention graph's) and constraints
        (their tokens need not be on the list)."""
        if self.shortlist is None or options.num_hypotheses > 1 or options.return_attention or options.constrained:
            return None
        return self.shortlist.vocab_ids(sources)

    def vocab_owners(
        self, sources: Sequence[Sequence[int]], vocab_ids: np.ndarray | None, session
    ) -> np.ndarray | None:
        """``Shortlist.owners`` for a fused ``session`` that takes them (issue 56); else None."""
        usable = vocab_ids is not None and len(sources) > 1 and self.shortlist is not None
        return self.shortlist.owners(sources, vocab_ids) if usable and has_vocab_sources(session) else None

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
        """The step session of the live decode (engine/live.py): the bundle's batch-invariant graph
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
        outputs["src_mask"] = source_mask(src, self.source_eos)
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
        return self.resolved(options).penalty

    def resolved(self, options: TranslateOptions) -> TranslateOptions:
        """``options`` resolved against this bundle's decoding defaults (engine/decoding.py ``resolve``); options
        the serving layer resolved already come back as they are."""
        return options.resolve(self.defaults)

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
        ``constraints``: per source, target token sequences its translation must hold (engine/constrained.py);
        sources with constraints decode with the constrained beam search, the others as usual."""
        options = self.resolved(options or TranslateOptions())
        if constraints is not None and any(constraints):
            return translate_constrained(self, sources, options, stats, [list(c) for c in constraints])
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
        """The free sentences' search, as the chooser names it (engine/chooser.py)."""
        limits = length_limits([len(s) for s in sources], self.max_source_tokens, options.max_length)
        session, lean = (self.step_decoder, True) if self.step_decoder is not None else (self.decoder, False)
        vocab = {"vocab_ids": self.vocab_subset(sources, options) if lean else None, "vocab_size": self.vocab_size}
        search = choose(self, options, len(sources), vocab["vocab_ids"])
        if search is Search.DEVICE:  # encoder outputs, cache on the device
            return device_search(self.device_runner, pad_batch(sources), limits, options, stats, self.source_eos)
        started = time.perf_counter()
        enc = self.run_encoder(sources)
        stats["encode"] = stats.get("encode", 0.0) + time.perf_counter() - started
        started = time.perf_counter()
        try:
            if search is Search.LOOP:
                return self._loop_search(enc, sources, limits, options, session, vocab)
            return self._step_search(enc, limits, options, session, lean, vocab, sources)
        finally:
            stats["decode"] = stats.get("decode", 0.0) + time.perf_counter() - started

    def _loop_search(
        self, enc: dict[str, np.ndarray], sources: list[list[int]], limits: list[int], options, session, vocab
    ) -> list[list[Hypothesis]]:
        """The search loop graph (engine/search_loop.py): a lone sentence, or the whole batch in the fused search
        (each source as it would be alone)."""
        loop = self.search_loop
        args = (options.beam_size, options.penalty, options.num_hypotheses, vocab["vocab_ids"])
        args += (options.no_repeat_ngram_size or 0,)
        own = self.vocab_owners(sources, vocab["vocab_ids"], loop.session)  # each source over its own list
        found = loop.search_batch(enc, limits, *args, own) if loop.batched else [loop.search(enc, limits[0], *args)]
        # with the block: None when the unblocked search took a token the block bans; searched again step by
        # step with the block (search_loop.py says why the other answers are the blocked search's own)
        again = [i for i, hypotheses in enumerate(found) if hypotheses is None]
        if again:
            some = {name: enc[name][:, again] for name in ("cross_keys", "cross_values")}
            some["src_mask"] = enc["src_mask"][again]
            twice = [sources[i] for i in again]
            redone = self._step_search(some, [limits[i] for i in again], options, session, True, vocab, twice)
            for i, hypotheses in zip(again, redone, strict=True):
                found[i] = hypotheses
        return found

    def _step_search(self, enc, limits, options: TranslateOptions, session, lean: bool, vocab, sources=()):
        """The search step by step in Python (engine/search.py); ``sources``: for ``vocab_owners``."""
        vocab = {**vocab, "vocab_sources": self.vocab_owners(sources, vocab["vocab_ids"], session)}
        k = options.beam_size
        keys, values, mask = enc["cross_keys"], enc["cross_values"], enc["src_mask"]
        if k == 1:
            state = DecoderState(session, keys, values, mask, lean, **vocab)
            return [[h] for h in greedy_search(guarded(state, options), limits, BOS_ID, EOS_ID)]
        rows = np.repeat(np.arange(len(limits)), k)
        state = DecoderState(session, keys, values, mask, lean, row_sources=rows, top_k=2 * k, **vocab)
        step = guarded(state, options)
        return beam_search(step, limits, BOS_ID, EOS_ID, k, options.penalty, options.num_hypotheses)

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
        state = DecoderState(self.step_decoder, enc["cross_keys"], enc["cross_values"], enc["src_mask"], lean=True)
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
