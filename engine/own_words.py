"""The model's own word for a glossary term's source words, kept out of the constrained search of its sentence.

A term the model would not say on its own ("Hund" -> "hound") otherwise comes beside the model's own word instead of
in its place: the search says "The dog" (the term's first subword is far from the step's best tokens there) and
places the term where it fits later ("The dog is sleeping hound."). Banning the model's own word for the source
words ("dog", from translating "Hund" alone) makes the term's first subword the best at that step, and the term takes
the word's place ("The hound is sleeping."). Only a one-word, one-subword own translation is banned (in each case
form): a subword that is only the start of a word would ban every word starting with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from engine.constrained import Constraint
from engine.search import StepFn, TopCandidates

PUNCTUATION = " .,;:!?\"'()[]«»„“”‘’-"
# words a sentence cannot do without (English, every shipped model's target): never banned, whatever a term's source
# words translate to alone (a glossary entry for "Das" must not take "the" from the whole sentence)
FUNCTION_WORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "had", "has", "have", "he", "her", "his",
        "i", "in", "is", "it", "its", "of", "on", "or", "our", "she", "that", "the", "their", "them", "they", "this",
        "to", "was", "we", "were", "with", "you",
    }
)  # fmt: skip


def own_word_ids(own: str, encode: Callable[[str], list[int]]) -> set[int]:
    """The subword ids of the model's own translation ``own`` of a term's source words, in its case forms: empty
    unless it is one word of one subword, and not a function word."""
    word = own.strip(PUNCTUATION)
    if not word or any(c.isspace() for c in word) or word.lower() in FUNCTION_WORDS:
        return set()
    forms = {word, word.lower(), word[:1].upper() + word[1:]}
    return {ids[0] for ids in (encode(f) for f in forms) if len(ids) == 1}


def banned_per_sentence(constraints: Sequence[Sequence[Constraint]], own: dict[str, set[int]]) -> dict[int, np.ndarray]:
    """Sentence index -> subword ids its search may not choose: the own words of its terms' source words (``own``:
    source words -> ids), less the first subwords of any of its constraints."""
    banned = {}
    for i, cons in enumerate(constraints):
        starts = {a[0] for c in cons for a in c.alternatives}
        ids = set().union(*(own.get(c.source, set()) for c in cons)) - starts
        if ids:
            banned[i] = np.asarray(sorted(ids), dtype=np.int64)
    return banned


def banning(step: StepFn, row_sources: Callable[[], np.ndarray], banned: dict[int, np.ndarray]) -> StepFn:
    """``step`` with each row's banned subwords at -inf (full log-probabilities and the graph's best candidates);
    ``row_sources()``: the sentence of each row after the step's gather (the decoder state's row_sources)."""
    if not banned:
        return step

    def banned_step(tokens: np.ndarray, rows: np.ndarray | None) -> np.ndarray | TopCandidates:
        out = step(tokens, rows)
        hits = [(r, banned[s]) for r, s in enumerate(row_sources().tolist()) if s in banned]
        if not hits:
            return out
        full = out.full if isinstance(out, TopCandidates) else out
        if full is not None:
            full = full.copy()
            for r, ids in hits:
                full[r, ids] = -np.inf
        if not isinstance(out, TopCandidates):
            return full
        log_probs = out.log_probs.copy()
        for r, ids in hits:
            log_probs[r, np.isin(out.ids[r], ids)] = -np.inf
        return TopCandidates(log_probs, out.ids, full)

    return banned_step
