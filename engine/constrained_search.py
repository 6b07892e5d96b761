"""The whole-batch search of sentences with constraints (glossary terms, do-not-translate spans): the free ones as
usual, the bound ones through the search the chooser names (engine/chooser.py): constrained greedy (one decoder
row a sentence, constrained_greedy.py) or the constrained beam search (constrained.py), each sentence's own words
for its terms banned (own_words.py)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from core.search import Hypothesis, length_limits
from core.tokenizer import BOS_ID, EOS_ID
from engine.chooser import Search, choose
from engine.constrained import Constraint, constrained_beam_search, constrained_beam_size
from engine.constrained_greedy import constrained_greedy_search
from engine.decoder_state import DecoderState
from engine.decoding import TranslateOptions
from engine.own_words import banned_per_sentence, banning, own_word_ids
from engine.translation import Translation

# engine/engine.py's Engine, which imports this module: named, not imported
Engine = Any


def translate_constrained(
    engine: Engine,
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
        for i, t in zip(free, engine.translate_ids([sources[i] for i in free], options, stats), strict=True):
            results[i] = t
    started = time.perf_counter()
    enc = engine.run_encoder([sources[i] for i in bound])
    stats["encode"] = stats.get("encode", 0.0) + time.perf_counter() - started
    started = time.perf_counter()
    cons = [constraints[i] for i in bound]
    banned = own_words(engine, cons)
    limits = length_limits([len(sources[i]) for i in bound], engine.max_source_tokens, options.max_length)
    if choose(engine, options, len(bound), None, constrained=True) is Search.CONSTRAINED_GREEDY:
        found = constrained_greedy(engine, [sources[i] for i in bound], enc, limits, cons, options, banned)
    else:
        found = constrained_beam(engine, enc, limits, cons, options, banned)
    stats["decode"] = stats.get("decode", 0.0) + time.perf_counter() - started
    for i, nbest in zip(bound, found, strict=True):
        results[i] = engine.translation(sources[i], nbest)
        stats["generated_tokens"] = stats.get("generated_tokens", 0) + sum(len(h.tokens) + 1 for h in nbest)
    if options.return_attention:
        engine.attach_attention([results[i] for i in bound])
    return results  # type: ignore[return-value]


def constrained_beam(
    engine: Engine,
    enc: dict[str, np.ndarray],
    limits: list[int],
    cons: list[list[Constraint]],
    options: TranslateOptions,
    banned: dict[int, np.ndarray] | None = None,
) -> list[list[Hypothesis]]:
    """The constrained beam search (constrained.py) of encoded sources with their constraints; ``banned``: each
    source's subwords the search may not choose (own_words)."""
    k = constrained_beam_size(options.beam_size, cons)
    session, lean = (engine.step_decoder, True) if engine.step_decoder is not None else (engine.decoder, False)
    rows = np.repeat(np.arange(len(cons)), k)
    state = DecoderState(
        session, enc["cross_keys"], enc["cross_values"], enc["src_mask"], lean, row_sources=rows, top_k=2 * k
    )
    state.fetch_full = True  # the constraint tokens' log-probabilities are read beside the graph's 2k best
    return constrained_beam_search(
        banning(state.step, lambda: state.row_sources, banned or {}),
        limits,
        BOS_ID,
        EOS_ID,
        k,
        options.penalty,
        min(options.num_hypotheses, k),
        cons,
        engine.max_source_tokens - 1,
        engine.after_term(),
    )


def constrained_greedy(
    engine: Engine,
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
    session, lean = (engine.step_decoder, True) if engine.step_decoder is not None else (engine.decoder, False)
    found: list[list[Hypothesis]] = [[] for _ in sources]
    todo, plans = list(range(len(sources))), None
    for _ in range(2):  # the second pass reads the same encoder outputs, of the stuck sources only
        row_sources = np.asarray(todo, dtype=np.int64)
        state = DecoderState(
            session, enc["cross_keys"], enc["cross_values"], enc["src_mask"], lean, row_sources=row_sources
        )
        hyps, stuck = constrained_greedy_search(
            banning(state.step, lambda state=state: state.row_sources, banned or {}),
            [limits[j] for j in todo],
            BOS_ID,
            EOS_ID,
            [cons[j] for j in todo],
            engine.max_source_tokens - 1,
            engine.after_term(),
            engine.greedy_term_top_k,
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
    enc = engine.run_encoder([sources[j] for j in todo])
    subset = {p: (banned or {})[j] for p, j in enumerate(todo) if j in (banned or {})}
    beams = constrained_beam(engine, enc, [limits[j] for j in todo], [cons[j] for j in todo], options, subset)
    for j, nbest in zip(todo, beams, strict=True):
        found[j] = nbest
    return found


def own_words(engine: Engine, cons: list[list[Constraint]]) -> dict[int, np.ndarray]:
    """Per constrained sentence, the model's own word for its glossary terms' source words (each translated alone,
    greedy): banned from its search so that the term takes that word's place (engine/own_words.py)."""
    words = sorted({c.source for sentence in cons for c in sentence if c.source})
    if not words:
        return {}
    own = engine.translate_ids(engine.source_ids(words), TranslateOptions(beam_size=1))
    encode = engine.tokenizer.encode
    return banned_per_sentence(cons, {w: own_word_ids(t.text, encode) for w, t in zip(words, own, strict=True)})
