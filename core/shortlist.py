"""The lexical shortlist of a bundle (issue 33): which target subwords a batch of sources may need.

A batch decodes over the union of the ``frequent`` target ids (the most frequent target subwords of the training
data) and, for every source subword of the batch, its likely translations (``targets_of``: a table learned from the
parallel data, export/shortlist.py), plus the special ids. The search then projects and normalizes over that subset
only (export/vocab_subset.py), as Marian's lexical shortlist and CTranslate2's vocabulary map do.

File (``shortlist.npz`` in the bundle, listed and hashed by the manifest like every other file): ``frequent`` (K,)
and ``targets`` (nnz,) ids (uint16 for vocabularies under 65,536, else int32), ``offsets`` (vocab + 1,) int64: the
translations of source id s are ``targets[offsets[s]:offsets[s + 1]]``, best first. Read with allow_pickle=False.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from core.tokenizer import SPECIAL_IDS

SHORTLIST_FILE = "shortlist.npz"


@dataclass(frozen=True)
class Shortlist:
    frequent: np.ndarray  # (K,) target ids, most frequent first
    offsets: np.ndarray  # (vocab + 1,) int64
    targets: np.ndarray  # (nnz,) target ids, each source's best first

    @property
    def vocab_size(self) -> int:
        return len(self.offsets) - 1

    def targets_of(self, source_id: int) -> np.ndarray:
        return self.targets[self.offsets[source_id] : self.offsets[source_id + 1]]

    @cached_property
    def _always(self) -> np.ndarray:
        """(vocab,) bool: the ids every subset holds (the frequent list and the special ids)."""
        mask = np.zeros(self.vocab_size, dtype=bool)
        mask[self.frequent.astype(np.int64)] = True
        mask[[i for i in SPECIAL_IDS.values() if 0 <= i < self.vocab_size]] = True
        return mask

    def vocab_ids(self, sources: Iterable[Sequence[int]], extra: Iterable[int] = ()) -> np.ndarray:
        """The ascending int64 target ids a batch of ``sources`` (subword ids) decodes over: the frequent list, the
        special ids, each source subword's translations and ``extra`` (ids of this vocabulary a request needs).

        A mask over the vocabulary, the translations of all the batch's subwords gathered in one indexing (their
        ranges of ``targets`` laid end to end): ~80 us for a lone sentence and ~0.3 ms for 32 on de-en 3's table,
        against ~0.3 and ~1.9 ms for one np.unique over a list of slices (throwaway timing, speed-log item 36)."""
        return union([self._translations(sources), np.fromiter(extra, dtype=np.int64)], self.vocab_size, self._always)

    def _translations(self, sources: Iterable[Sequence[int]]) -> np.ndarray:
        """The translations (target ids, with repeats) of every subword of ``sources`` this vocabulary has."""
        seen = np.unique(np.fromiter((t for s in sources for t in s), dtype=np.int64))
        seen = seen[(seen >= 0) & (seen < self.vocab_size)]
        starts, ends = self.offsets[seen], self.offsets[seen + 1]
        lengths = ends - starts
        # position j of the joined ranges reads targets[starts[r] + j - (where range r begins in the join)]
        begins = np.cumsum(lengths) - lengths
        where = np.arange(int(lengths.sum())) + np.repeat(starts - begins, lengths)
        return self.targets[where]

    def owners(self, sources: Sequence[Sequence[int]], vocab_ids: np.ndarray) -> np.ndarray:
        """(sources, len(vocab_ids)) bool: the ids of a batch's union ``vocab_ids`` that each source's own list holds
        (the fused step's ``vocab_sources``: each source normalizes over its own list, as it does alone). One mask over
        the vocabulary per source, every source's translations set in one indexing (their ranges of ``targets`` laid
        end to end, as ``_translations``), read at ``vocab_ids``: ~0.2 ms for 32 Multi30k sources on de-en 3's table,
        against ~0.5 ms for a mask per source in a loop and 1.26 ms for np.isin (speed-log items 55-56)."""
        lengths = [len(s) for s in sources]
        ids = np.fromiter((t for s in sources for t in s), dtype=np.int64, count=sum(lengths))
        row = np.repeat(np.arange(len(sources)), lengths)
        keep = (ids >= 0) & (ids < self.vocab_size)
        ids, row = ids[keep], row[keep]
        starts, counts = self.offsets[ids], self.offsets[ids + 1] - self.offsets[ids]
        begins = np.cumsum(counts) - counts
        where = np.arange(int(counts.sum())) + np.repeat(starts - begins, counts)
        masks = np.repeat(self._always[None, :], len(sources), axis=0)  # (sources, vocab)
        masks[np.repeat(row, counts), self.targets[where].astype(np.int64)] = True
        return masks[:, vocab_ids]

    def save(self, path: Path) -> Path:
        dtype = np.uint16 if self.vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32
        with open(path, "wb") as f:  # np.savez on a path would append ".npz" to names without it
            np.savez_compressed(
                f,
                frequent=self.frequent.astype(dtype),
                offsets=self.offsets.astype(np.int64),
                targets=self.targets.astype(dtype),
            )
        return path


def union(id_lists: Iterable[np.ndarray], vocab_size: int, always: np.ndarray | None = None) -> np.ndarray:
    """The ascending int64 ids in any of ``id_lists`` (ids of a ``vocab_size`` vocabulary, as ``vocab_ids`` gives
    them) or set in ``always`` (a (vocab_size,) bool mask, left unchanged): a mask over the vocabulary, ~0.15 ms for
    32 lists of ~1,100 ids of 16,000 against ~4.3 ms for np.unique over their concatenation (throwaway timing,
    speed-log item 37)."""
    mask = np.zeros(vocab_size, dtype=bool) if always is None else always.copy()
    for ids in id_lists:
        mask[ids] = True
    return np.flatnonzero(mask).astype(np.int64)


def load_shortlist(path: Path, vocab_size: int) -> Shortlist:
    """Read ``path``; raises ValueError when it does not fit a vocabulary of ``vocab_size``."""
    with np.load(path, allow_pickle=False) as data:
        shortlist = Shortlist(data["frequent"], data["offsets"], data["targets"])
    offsets = shortlist.offsets
    if (
        shortlist.vocab_size != vocab_size
        or offsets[0] != 0
        or offsets[-1] != len(shortlist.targets)
        or np.any(np.diff(offsets) < 0)
        or any(len(a) and int(a.max()) >= vocab_size for a in (shortlist.frequent, shortlist.targets))
    ):
        raise ValueError(f"{path}: not a shortlist of a {vocab_size}-id vocabulary")
    return shortlist
