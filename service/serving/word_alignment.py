"""One translated sentence's words aligned to its source words by cross-attention (the HTML path places its inline
markup with them, service/serving/html.py; documents too): each target word's source word, glossary terms cased as
the text's, closing punctuation a word of its own."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.tokenizer import EOS_ID
from engine.translation import Translation
from service.models.registry import LoadedModel
from service.serving.html import Aligned
from service.serving.terms import Use, recase_words, restore_words
from service.serving.words import match_initial_case, split_punctuation


def _word_starts(pieces: Sequence[str]) -> list[int]:
    """Word index of each subword: a new word at each piece that starts with '▁' (and at the first piece)."""
    index, out = -1, []
    for i, piece in enumerate(pieces):
        if i == 0 or piece.startswith("\u2581"):
            index += 1
        out.append(index)
    return out


def align_words(
    model: LoadedModel, t: Translation, n_source_words: int, uses: Sequence[Use] = (), source: str = ""
) -> Aligned:
    """Target words of a translation and, for each, the source word (of ``n_source_words``, whitespace-split)
    it attends to most; a lower-case glossary term among them cased as the text's (``uses``: terms.recase); closing
    punctuation a word of its own aligned to nothing, the first word cased as the ``source`` sentence begins
    (service/serving/words.py)."""
    words, links = _aligned(model, t, n_source_words, uses)
    if words and source:
        words[0] = match_initial_case(source, words[0])
    return split_punctuation(words, links)


def _aligned(model: LoadedModel, t: Translation, n_source_words: int, uses: Sequence[Use]) -> Aligned:
    engine = model.engine
    target_pieces = engine.pieces(t.token_ids)
    groups: list[list[int]] = []
    for j, piece in enumerate(target_pieces):
        if j == 0 or (piece.startswith("\u2581") and piece != "\u2581"):
            groups.append([])
        groups[-1].append(j)
    words = restore_words([engine.tokenizer.decode([t.token_ids[j] for j in g]).strip() for g in groups], uses)
    keep = [i for i, w in enumerate(words) if w]
    words, groups = recase_words([words[i] for i in keep], uses), [groups[i] for i in keep]
    if t.attention is None or not groups or n_source_words == 0:
        return words, [None] * len(words)
    source_pieces = engine.pieces([i for i in t.source_ids if i != EOS_ID])
    piece_word = _word_starts(source_pieces)
    n_piece_words = (piece_word[-1] + 1) if piece_word else 0
    if n_piece_words != n_source_words and n_piece_words:  # normalisation merged or split words: scale
        piece_word = [min(n_source_words - 1, w * n_source_words // n_piece_words) for w in piece_word]
    attention = t.attention.mean(axis=(0, 1))[:, : len(source_pieces)]  # (target subwords, source subwords)
    by_word = np.zeros((attention.shape[0], n_source_words))
    for p, w in enumerate(piece_word):
        by_word[:, w] += attention[:, p]
    links: list[int | None] = [int(np.argmax(by_word[g].mean(axis=0))) for g in groups]
    return words, links
