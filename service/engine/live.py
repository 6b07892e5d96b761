"""Continuous (iteration-level) batching of translation search: a live decoding state that sentences join and
leave at any step, like TGI's ``generate_token(batch)`` but for an encoder-decoder model on onnxruntime.

``LiveBatch.add`` runs the encoder for the newcomers only and keeps their cross-attention keys/values in slots
of a per-source store (service/engine/source_slots.py); they join at the next ``step``. ``step`` runs one decoder
step (the engine's live step graph, ``Engine.live_step``: decoder_step.onnx of interface 3 or 4) for every live
row, whatever its sentence's position, search (greedy or beam of any size), length penalty or length limit, and
hands back each sentence the step it finishes (EOS, beams done, or its limit);
``remove`` takes a sentence out at any step (its rows leave at the next one). A sentence gives the answer it gets
alone in a live batch (same search code as service/engine/search.py, per sentence: same choices, ties and sums, and
with an interface-4 graph the same step outputs to the bit; an interface-3 graph's float rounding may differ in the
last bit as the padded cache's width changes). Where a bundle has a second step graph for whole batches
(``decoder_step_batch``), Engine.translate's answer is the same in fp32; in int8 a score can differ from it by a
quantization step (the two graphs sum in different orders: docs/reliability.md). The repeated-n-gram block
(``TranslateOptions.no_repeat_ngram_size``) bans each row's tokens from its ``history`` (service/engine/no_repeat.py
``banned_after``), the graph's TopK ranking as many more candidates as a row has banned, as the whole-batch search
does. With a lexical shortlist (core/shortlist.py) a step projects onto the union
of its sentences' lists, so a sentence's log-probabilities are normalized over a set its companions widen: its
answer may then differ from the one it gets alone (as in any shortlist decoder: Marian, CTranslate2); a sentence that
needs the whole vocabulary (Engine.vocab_subset) makes the steps it is live in run over the whole vocabulary.

Layout between steps. Rows are grouped by beam size (greedy = 1 row per sentence, then beam sizes ascending), a
sentence's rows next to each other. The self-attention cache (per layer (rows, heads, width, d_head)) is right
padded (step interface 4): a row's real entries are its first ``positions[r]`` columns and the step writes its new
key/value at column ``positions[r]``, so a row's attention reads its entries at the columns it reads them alone
and its result is bit-identical beside any rows (what the int8 graph needs: docs/reliability.md, issue 36).
Padding columns are zeros (the fused kernel adds -10000 to masked scores, so padding must stay small and finite).
Bundles of interface 3 keep the left-padded cache their graph appends to (a row's entries last). Every step adds
one column; when the widest row leaves, the columns no row uses any more are cut. ``history`` (rows, width) holds
each row's generated tokens, left padded (its last ``positions[r]`` columns) whatever the cache's layout. A step's
reordering (beams trading places, finished rows leaving, newcomers joining with an all-padding cache) is applied
once, at the start of the next step, in one gather.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from core.graphs import (
    MAX_TOP_K_KEY,
    VOCAB_IDS,
    VOCAB_SOURCES,
    has_vocab_ids,
    has_vocab_sources,
    right_padded,
    step_interface,
    step_present_names,
)
from core.search import Hypothesis, length_limits
from core.shortlist import union
from core.tokenizer import BOS_ID, EOS_ID
from service.engine.engine import Engine, TranslateOptions, Translation
from service.engine.no_repeat import banned_after, drop_banned
from service.engine.reorder import ReorderBuffers
from service.engine.search import rank, rank_one, top_candidates
from service.engine.source_slots import SourceSlots
from service.engine.step_inputs import position_inputs, ragged_inputs


def supports_live(engine: Engine) -> bool:
    """Whether the engine's bundle has a live step graph of interface 3 or later (older bundles: whole batches only);
    the engine picks it (``Engine.live_step``: the bundle's interface-4 graph where whole-batch search has one of its
    own)."""
    session = engine.live_step
    return session is not None and step_interface(session.get_modelmeta().custom_metadata_map) >= 3


@dataclass(eq=False)
class _Sentence:
    key: Hashable
    source: list[int]
    options: TranslateOptions
    limit: int
    stream: bool
    slot: int  # its source's place in the cross keys/values store
    finished: list[Hypothesis] = field(default_factory=list)  # beam hypotheses that ended
    emitted: int = 0  # tokens handed out as progress (streaming)
    vocab: np.ndarray | None = None  # its shortlist ids (Engine.vocab_subset); None: it needs the whole vocabulary

    @property
    def k(self) -> int:
        return self.options.beam_size


@dataclass(eq=False)
class _Group:
    """The live sentences of one beam size and, between steps, their next rows: ``parent`` (m, k) the cache row
    each continues (-1: a newcomer), ``token`` the token it feeds next, ``score`` its running score. Per sentence,
    as arrays that a step reads without a loop over the sentences: ``slots`` (its source's slot), ``limits`` (its
    length limit), ``joined`` (the step counter at its first step) and ``ended`` (beam hypotheses that ended)."""

    k: int
    sentences: list[_Sentence] = field(default_factory=list)
    parent: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int64))
    token: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int64))
    score: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.float64))
    slots: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    limits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    joined: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ended: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    offset: int = 0  # its first row in the current layout

    def __post_init__(self) -> None:
        self.parent = np.zeros((0, self.k), np.int64)
        self.token = np.zeros((0, self.k), np.int64)
        self.score = np.zeros((0, self.k), np.float64)

    def append(self, sentence: _Sentence, first_step: int) -> None:
        self.sentences.append(sentence)
        start = np.full((1, self.k), -np.inf)
        start[0, 0] = 0.0  # identical start beams: keep one alive (as search.beam_search)
        self.parent = np.concatenate([self.parent, np.full((1, self.k), -1, np.int64)])
        self.token = np.concatenate([self.token, np.full((1, self.k), BOS_ID, np.int64)])
        self.score = np.concatenate([self.score, start])
        self.slots = np.append(self.slots, sentence.slot)
        self.limits = np.append(self.limits, sentence.limit)
        self.joined = np.append(self.joined, first_step)
        self.ended = np.append(self.ended, 0)

    def drop(self, keep: np.ndarray) -> None:
        if keep.all():  # the usual step: nobody leaves
            return
        self.sentences = [s for s, k in zip(self.sentences, keep.tolist(), strict=True) if k]
        self.parent, self.token, self.score = self.parent[keep], self.token[keep], self.score[keep]
        self.slots, self.limits = self.slots[keep], self.limits[keep]
        self.joined, self.ended = self.joined[keep], self.ended[keep]


@dataclass
class StepOutput:
    """What one step produced: sentences that finished (key, Translation), streaming progress (key -> tokens that
    became final this step: greedy's new token, or the new part of the prefix every live beam and every ended
    hypothesis of the sentence shares, which can never change), and the rows that ran."""

    finished: list[tuple[Hashable, Translation]] = field(default_factory=list)
    progress: dict[Hashable, list[int]] = field(default_factory=dict)
    rows: int = 0
    seconds: float = 0.0
    generated_tokens: int = 0


class LiveBatch:
    """A live decoding state on one engine. Not thread-safe: one thread calls add, remove and step."""

    def __init__(self, engine: Engine) -> None:
        if not supports_live(engine):
            raise ValueError("continuous batching needs a decoder_step graph of interface 3; re-export the bundle")
        self.engine = engine
        self.session = engine.live_step
        cfg = engine.config
        self.n_layers, self.heads = int(cfg["n_decoder_layers"]), int(cfg["n_heads"])
        self.d_head = int(cfg["d_model"]) // self.heads
        metadata = self.session.get_modelmeta().custom_metadata_map
        self.max_top_k = int(metadata.get(MAX_TOP_K_KEY, 1 << 30))
        self.right = right_padded(step_interface(metadata))  # the cache's layout (module docstring)
        self._presents = step_present_names(self.n_layers)
        # the lexical shortlist (core/shortlist.py): a step decodes over the union of its sentences' lists, or over
        # the whole vocabulary while one of them needs it; cached for the step's sentence keys
        self.takes_vocab = has_vocab_ids(self.session)
        self._vocab: tuple[tuple[Hashable, ...], np.ndarray] = ((), np.zeros(0, np.int64))
        # a fused step normalizes each source over its own list within the union (core/graphs.py VOCAB_SOURCES), so
        # that a sentence's answer does not depend on its companions; cached for the step's sentences and slots
        self.takes_owners = has_vocab_sources(self.session)
        self._owners: tuple[tuple, np.ndarray | None] = ((), None)
        self.groups: dict[int, _Group] = {}
        self.sentences: dict[Hashable, _Sentence] = {}
        self._counter = 0  # steps run
        # rows of the last step (physical layout): caches per layer, start column, history of generated tokens
        empty = np.zeros((0, self.heads, 0, self.d_head), np.float32)
        self.keys: list[np.ndarray] = [empty] * self.n_layers
        self.values: list[np.ndarray] = [empty] * self.n_layers
        self.start = np.zeros(0, np.int64)
        self.history = np.zeros((0, 0), np.int64)
        self.width = 0
        self.sources = SourceSlots(self.n_layers, self.heads, self.d_head)  # cross keys/values, one slot a source
        # the last step's (slots fed, row sources, query_rows, row_slots): reused while the rows' sources stay
        self._layout: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None
        # the buffers the cache reordering gathers into
        self._reorder = ReorderBuffers()

    # --- what it holds ---------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        """Rows of the next step (live sentences x their beam sizes)."""
        return sum(len(g.sentences) * g.k for g in self.groups.values())

    def __len__(self) -> int:
        return len(self.sentences)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.sentences

    def bytes_per_position(self) -> int:
        """Cache bytes of one row and one position (keys and values of every layer, float32)."""
        return 2 * self.n_layers * self.heads * self.d_head * 4

    # --- join and leave --------------------------------------------------------------------------
    def add(
        self, items: Sequence[tuple[Hashable, list[int], TranslateOptions, bool]]
    ) -> tuple[list[tuple[Hashable, Translation]], float]:
        """Sentences (key, source ids + EOS, options, stream) join at the next step; the encoder runs for them now.

        Returns the sentences answered at once (an empty text translates to an empty text) and the encoder seconds.
        """
        done: list[tuple[Hashable, Translation]] = []
        work = []
        for key, source, options, stream in items:
            if key in self.sentences:
                raise ValueError(f"sentence {key!r} is already live")
            if len(source) <= 1:
                done.append((key, self.engine.empty_translation(source, options)))
            else:
                work.append((key, source, options, stream))
        if not work:
            return done, 0.0
        started = time.perf_counter()
        enc = self.engine.run_encoder([w[1] for w in work])
        slots = self.sources.store(enc["cross_keys"], enc["cross_values"], enc["src_mask"])
        for (key, source, options, stream), slot in zip(work, slots, strict=True):
            limit = length_limits([len(source)], self.engine.max_source_tokens, options.max_length)[0]
            sentence = _Sentence(key, source, options, limit, stream, slot)
            if self.takes_vocab:
                sentence.vocab = self.engine.vocab_subset([source], options)
            self.sentences[key] = sentence
            # it joins at the next step, which the step counter (advanced at the end of a step) numbers now
            self.groups.setdefault(options.beam_size, _Group(options.beam_size)).append(sentence, self._counter)
        self.groups = dict(sorted(self.groups.items()))
        return done, time.perf_counter() - started

    def remove(self, key: Hashable) -> bool:
        """Take a sentence out (cancelled, deadline passed); its rows leave at the next step. False if not live."""
        sentence = self.sentences.pop(key, None)
        if sentence is None:
            return False
        group = self.groups[sentence.k]
        group.drop(np.array([s is not sentence for s in group.sentences], dtype=bool))
        self._release(sentence)
        return True

    def _release(self, sentence: _Sentence) -> None:
        """The sentence's source slot is free; when the store was compacted, every live sentence's slot follows."""
        moved = self.sources.release(sentence.slot)
        if moved is None:
            return
        new_slot = {old: new for new, old in enumerate(moved)}
        for live in self.sentences.values():
            live.slot = new_slot[live.slot]
        for group in self.groups.values():
            group.slots = np.fromiter((s.slot for s in group.sentences), np.int64, len(group.sentences))

    # --- one step --------------------------------------------------------------------------------
    def step(self) -> StepOutput:
        """One decoder step for every live row; returns the sentences that finished and streaming progress."""
        started = time.perf_counter()
        out = StepOutput()
        self._materialize()
        rows = len(self.start)
        out.rows = rows
        if rows == 0:
            return out
        groups = [g for g in self.groups.values() if g.sentences]
        beam_k = max((g.k for g in groups if g.k > 1), default=0)
        vocab = self._vocab_ids(groups)
        if len(vocab):  # over a subset the graph's TopK ranks for greedy rows too, and top_ids are vocabulary ids
            fetch_top, top_k = True, max(1, 2 * beam_k)
        else:
            fetch_top = 0 < 2 * beam_k <= self.max_top_k
            top_k = 2 * beam_k if fetch_top else 0
        banned = self._banned(groups, rows)
        # the graph's TopK ranks as many more candidates as a row has banned tokens (as NoRepeatNgram's widen)
        ranked = min(top_k + banned.shape[1], len(vocab) or self.max_top_k) if fetch_top else 0
        feeds = self._feeds(groups, max(top_k, ranked))
        if self.takes_vocab:
            feeds[VOCAB_IDS] = vocab
            owners = self._vocab_owners(groups, vocab)
            if owners is not None:
                feeds[VOCAB_SOURCES] = owners
        fetch = ["top_log_probs", "top_ids", *self._presents] if fetch_top else ["log_probs", *self._presents]
        outputs = self.session.run(fetch, feeds)
        n_out = 2 if fetch_top else 1
        self.keys, self.values = list(outputs[n_out::2]), list(outputs[n_out + 1 :: 2])
        if fetch_top:
            top_ids, top_lp = drop_banned(outputs[1], outputs[0], banned, top_k)
            log_probs = None
        else:
            top_lp = top_ids = None
            log_probs = outputs[0]
            if banned.shape[1]:
                hit = np.nonzero(banned >= 0)
                log_probs[hit[0], banned[hit]] = -np.inf
        width = self.width
        for group in groups:
            lo, hi = group.offset, group.offset + len(group.sentences) * group.k
            if group.k == 1:
                if log_probs is None:
                    best, best_lp = top_ids[lo:hi, 0], top_lp[lo:hi, 0]
                else:
                    best = log_probs[lo:hi].argmax(axis=1)  # the first maximum, as TopK's lower id among ties
                    best_lp = log_probs[lo:hi][np.arange(hi - lo), best]
                self._greedy(group, best, best_lp, width, out)
            else:
                c = 2 * group.k
                if log_probs is None:
                    ids, lps = top_ids[lo:hi, :c], top_lp[lo:hi, :c]  # the first c of a longer ranking: the same
                else:
                    top = top_candidates(log_probs[lo:hi], c)
                    ids, lps = top.ids, top.log_probs
                self._beam(group, ids, lps, width, out)
        self.width = width + 1
        self._counter += 1
        out.seconds = time.perf_counter() - started
        return out

    def _banned(self, groups: list[_Group], rows: int) -> np.ndarray:
        """(rows, m) the tokens each row's repeated-n-gram block bans this step (-1 pads; service/engine/no_repeat.py),
        from the history of its generated tokens."""
        sizes = np.concatenate(
            [np.repeat([s.options.no_repeat_ngram_size or 0 for s in g.sentences], g.k) for g in groups]
            or [np.zeros(0, np.int64)]
        )
        if not sizes.any():  # no sentence blocks n-grams
            return np.zeros((rows, 0), np.int64)
        lengths = np.concatenate([np.repeat(self._steps(g), g.k) for g in groups])
        history = self.history[:, : self.width]
        parts = []
        for size in np.unique(sizes[sizes > 0]).tolist():
            which = np.flatnonzero(sizes == size)
            parts.append((which, banned_after(history[which], lengths[which], size)))
        out = np.full((rows, max(p.shape[1] for _, p in parts)), -1, np.int64)
        for which, part in parts:
            out[which, : part.shape[1]] = part
        return out

    def _vocab_ids(self, groups: list[_Group]) -> np.ndarray:
        """The step's vocabulary subset: the union of its sentences' shortlists, empty (the whole vocabulary)
        without a shortlist or while a sentence needs the whole vocabulary."""
        if not self.takes_vocab:
            return self._vocab[1]
        keys = tuple(s.key for g in groups for s in g.sentences)
        if keys != self._vocab[0]:
            lists = [s.vocab for g in groups for s in g.sentences]
            if any(v is None for v in lists):
                self._vocab = (keys, np.zeros(0, np.int64))
            else:
                self._vocab = (keys, union(lists, self.engine.vocab_size))  # type: ignore[arg-type]
        return self._vocab[1]

    def _vocab_owners(self, groups: list[_Group], vocab: np.ndarray) -> np.ndarray | None:
        """(source slots fed, subset) bool: the ids of the step's union each slot's sentence owns (free slots own
        all: no row reads them); None without a subset, a session that takes none, or one sentence."""
        sentences = [s for g in groups for s in g.sentences]
        if not self.takes_owners or not len(vocab) or len(sentences) < 2:
            return None
        used = self.sources.used
        key = (self._vocab[0], used, tuple(s.slot for s in sentences))
        if key != self._owners[0]:
            owners = np.ones((used, len(vocab)), dtype=bool)
            for s in sentences:
                owners[s.slot] = np.isin(vocab, s.vocab, assume_unique=True)
            self._owners = (key, owners)
        return self._owners[1]

    def _feeds(self, groups: list[_Group], top_k: int) -> dict[str, np.ndarray]:
        row_sources = np.concatenate([g.slots if g.k == 1 else np.repeat(g.slots, g.k) for g in groups])
        positions = self.width - self.start
        layout, used = self._layout, self.sources.used
        if layout is not None and layout[0] == used and np.array_equal(layout[1], row_sources):
            # the rows read the same sources as last step: only positions and the mask change
            feeds = position_inputs(positions, self.width, self.right)
            feeds.update(query_rows=layout[2], row_slots=layout[3])
        else:
            feeds = ragged_inputs(positions, row_sources, used, self.width, self.right)
            self._layout = (used, row_sources, feeds["query_rows"], feeds["row_slots"])
        last = np.concatenate([g.token.reshape(-1) for g in groups])
        feeds["tokens"] = last.reshape(-1, 1)
        feeds["top_k"] = np.array([top_k], dtype=np.int64)
        feeds.update(self.sources.feeds())
        for i in range(self.n_layers):
            feeds[f"past_keys_{i}"], feeds[f"past_values_{i}"] = self.keys[i], self.values[i]
        return feeds

    def _materialize(self) -> None:
        """Apply the last step's reordering, removals and newcomers to the cache and history in one gather."""
        groups = [g for g in self.groups.values() if g.sentences]
        parent = np.concatenate([g.parent.reshape(-1) for g in groups]) if groups else np.zeros(0, np.int64)
        history_col = np.concatenate([g.token.reshape(-1) for g in groups]) if groups else np.zeros(0, np.int64)
        offset = 0
        for g in self.groups.values():
            g.offset = offset
            offset += len(g.sentences) * g.k
        new = parent < 0
        physical = len(self.start)
        if not new.any() and len(parent) == physical and np.array_equal(parent, np.arange(physical)):
            # every row continues in place: only the history grows (by the tokens fed this step)
            self.history = np.concatenate([self.history, history_col[:, None]], axis=1)
            for g in groups:
                g.parent = np.arange(g.offset, g.offset + g.parent.size).reshape(g.parent.shape)
            return
        width = self.width  # the last step's cache width (the history is one column behind until now)
        has_new = bool(new.any())
        source = np.where(new, 0, parent) if has_new else parent
        if not physical:
            start = np.full(len(parent), width, np.int64)
        else:
            start = np.where(new, width, self.start[source]) if has_new else self.start[source]
        cut = int(start.min()) if len(start) else width  # columns no row uses any more
        if cut >= width:  # no row continues: an empty cache
            shape = (len(parent), self.heads, 0, self.d_head)
            self.keys = [np.zeros(shape, np.float32) for _ in range(self.n_layers)]
            self.values = [np.zeros(shape, np.float32) for _ in range(self.n_layers)]
            self.history = np.zeros((len(parent), 0), np.int64)
        else:
            fresh = new if has_new else None
            self.keys = [self._gather(a, source, fresh, cut, ("k", i)) for i, a in enumerate(self.keys)]
            self.values = [self._gather(a, source, fresh, cut, ("v", i)) for i, a in enumerate(self.values)]
            history = self.history[source, cut:]
            if has_new:
                history[new] = 0
                history_col = np.where(new, 0, history_col)  # a newcomer's BOS is no generated token
            self.history = np.concatenate([history, history_col[:, None]], axis=1)
        self.start = start - cut
        self.width = width - cut
        for g in groups:
            g.parent = np.arange(g.offset, g.offset + g.parent.size).reshape(g.parent.shape)

    def _gather(
        self, array: np.ndarray, rows: np.ndarray, new: np.ndarray | None, cut: int, slot: tuple[str, int]
    ) -> np.ndarray:
        """``array[rows]`` without the ``cut`` columns no row uses (the last ones of a right-padded cache, the first
        ones of a left-padded one), in the buffer kept for this cache tensor when no column is cut; a newcomer's rows
        are zeros (padding). With columns cut, numpy's fancy indexing copies the strided view directly, where
        ``np.take`` would first copy the whole view to contiguous memory (2.5x the time: docs/engine-speed-log.md)."""
        if not cut:
            out = self._reorder.take(array, rows, slot)
        else:
            out = array[rows, :, : array.shape[2] - cut] if self.right else array[rows, :, cut:]
        if new is not None:
            out[new] = 0.0
        return out

    # --- search bookkeeping (service/engine/search.py, one sentence at a time in spirit) ----------------
    def _steps(self, group: _Group) -> np.ndarray:
        """Each sentence's own step t (0 at its first step)."""
        return self._counter - group.joined

    def _finish(self, sentence: _Sentence, nbest: list[Hypothesis], out: StepOutput) -> None:
        del self.sentences[sentence.key]
        self._release(sentence)
        translation = self.engine.translation(sentence.source, nbest)
        if sentence.options.return_attention:
            self.engine.attach_attention([translation])
        out.finished.append((sentence.key, translation))
        out.generated_tokens += sum(len(h.tokens) + 1 for h in nbest)

    def _greedy(self, group: _Group, best: np.ndarray, best_lp: np.ndarray, width: int, out: StepOutput) -> None:
        """greedy_search's step for the group's sentences: the best token, score summed in float64."""
        m = len(group.sentences)
        t = self._steps(group)
        rows = group.offset + np.arange(m)
        score = group.score.reshape(-1) + best_lp.astype(np.float64)
        is_eos = best == EOS_ID
        stop = is_eos | (t + 1 >= group.limits)
        for i in np.flatnonzero(stop).tolist():
            tokens = self.history[rows[i], width - t[i] : width].tolist()
            if not is_eos[i]:
                tokens.append(int(best[i]))
            total = float(score[i])
            self._finish(group.sentences[i], [Hypothesis(tokens, total, total)], out)
        keep = ~stop
        for i in np.flatnonzero(keep).tolist():
            sentence = group.sentences[i]
            if sentence.stream:
                out.progress[sentence.key] = [int(best[i])]
                sentence.emitted += 1
        group.drop(keep)
        group.parent = rows[keep].reshape(-1, 1)
        group.token = best[keep].reshape(-1, 1).astype(np.int64)
        group.score = score[keep].reshape(-1, 1)

    def _beam(self, group: _Group, ids: np.ndarray, lps: np.ndarray, width: int, out: StepOutput) -> None:
        """beam_search's step for the group's sentences (same ranking, ties, hypothesis ends and limits)."""
        m, k = len(group.sentences), group.k
        t = self._steps(group)
        if m == 1:
            next_rows, next_ids, next_scores = self._rank_one(group, ids, lps, int(t[0]), width)
        else:
            next_rows, next_ids, next_scores = self._rank(group, ids, lps, t, width)
        done = group.ended >= k
        at_limit = ~done & (t + 1 >= group.limits)
        for i in np.flatnonzero(at_limit).tolist():  # length limit: the live hypotheses end as they are
            s = group.sentences[i]
            for row, token, score in zip(
                next_rows[i].tolist(), next_ids[i].tolist(), next_scores[i].tolist(), strict=True
            ):
                seq = self.history[row, width - t[i] : width].tolist() + [token]
                s.finished.append(Hypothesis.beam(seq, score, len(seq), self.engine.penalty(s.options)))
        still = ~(done | at_limit)
        for i in np.flatnonzero(~still).tolist():
            s = group.sentences[i]
            self._finish(s, sorted(s.finished, key=lambda h: -h.normalized)[: s.options.num_hypotheses], out)
        for i in np.flatnonzero(still).tolist():
            s = group.sentences[i]
            if s.stream:
                self._beam_progress(s, next_rows[i], next_ids[i], int(t[i]), width, out)
        group.drop(still)
        if still.all():
            group.parent, group.token, group.score = next_rows, next_ids.astype(np.int64), next_scores
        else:
            group.parent, group.token = next_rows[still], next_ids[still].astype(np.int64)
            group.score = next_scores[still]

    def _rank(
        self, group: _Group, ids: np.ndarray, lps: np.ndarray, t: np.ndarray, width: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rank every sentence's candidates at once (search.rank, as the whole-batch search): the hypotheses that end
        with EOS among the k best are kept; returns the next rows, tokens and scores, (m, k) each."""
        ended, rows, tokens, scores = rank(group.score, lps, ids, group.k, EOS_ID)
        for i, row, score in ended:
            s = group.sentences[i]
            seq = self.history[group.offset + row, width - t[i] : width].tolist()
            s.finished.append(Hypothesis.beam(seq, score, int(t[i]) + 1, self.engine.penalty(s.options)))
            group.ended[i] += 1
        return group.offset + rows, tokens, scores

    def _rank_one(
        self, group: _Group, ids: np.ndarray, lps: np.ndarray, t: int, width: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_rank`` for a group of one sentence, in Python scalars (search.rank_one, as the whole-batch search)."""
        s, k = group.sentences[0], group.k
        ended, going = rank_one(group.score[0].tolist(), lps.tolist(), ids.tolist(), k, EOS_ID)
        for beam, score in ended:
            seq = self.history[group.offset + beam, width - t : width].tolist()
            s.finished.append(Hypothesis.beam(seq, score, t + 1, self.engine.penalty(s.options)))
        group.ended[0] += len(ended)
        rows = np.array([[group.offset + beam for beam, _, _ in going]], dtype=np.int64)
        tokens = np.array([[token for _, token, _ in going]], dtype=np.int64)
        return rows, tokens, np.array([[score for _, _, score in going]], dtype=np.float64)

    def _beam_progress(
        self, s: _Sentence, rows: np.ndarray, tokens: np.ndarray, t: int, width: int, out: StepOutput
    ) -> None:
        """The new part of the prefix that every live beam and every ended hypothesis share (it can never change)."""
        beams = np.concatenate([self.history[rows, width - t : width], tokens[:, None]], axis=1)  # (k, t + 1)
        differs = (beams != beams[:1]).any(axis=0)
        shared = int(np.argmax(differs)) if differs.any() else beams.shape[1]
        first = beams[0, :shared].tolist()
        for h in s.finished:
            n = min(shared, len(h.tokens))
            same = next((j for j in range(n) if h.tokens[j] != first[j]), n)
            shared = min(shared, same)
        if shared > s.emitted:
            out.progress[s.key] = first[s.emitted : shared]
            s.emitted = shared
