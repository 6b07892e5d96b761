"""Training pairs on disk: tokenized, length-sorted shards of memory-mapped numpy arrays, and their reader.

A corpus larger than memory cannot go through ``load_data`` (every pair encoded into Python lists).
``python -m model.cli shard`` (:func:`write_shards`) reads the training split ``shard_pairs`` lines at a time,
encodes and filters each chunk as the in-memory path does (model/data.py ``encode_pairs``), sorts it by length
(the longer side first) and writes it as one shard: ``NNNNN.src.npy`` and ``NNNNN.tgt.npy`` (the pairs' ids,
specials included, one pair after another) and ``NNNNN.len.npy`` (each pair's source and target length).
``manifest.json`` lists the shards with their pair counts, byte sizes and sha256 digests, the tokenizer's
digest and the settings; the tokenizer is copied beside (a run on these shards needs its ids). Shards are
consecutive chunks of the corpus: ``model.cli prepare`` writes its training split shuffled, which makes each
chunk a random sample.

A run streams them (:class:`ShardBatches`): each epoch takes the shards in an order shuffled by
``seed + epoch``; a shard's pairs, sorted, are cut into token-budget batches (model/data.py
``token_budget_ends``, the in-memory rule) and taken in an order shuffled by ``(seed, epoch, shard)``: the
shuffle window is one shard, and only that shard's pages are read. A batch key is ``(shard, first, end)``,
so the order from any position is computed from the lengths alone: ranks take it in turn, a checkpoint
records a number, and a resumed run starts where it stopped without reading what came before.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from model.checkpoint import TOKENIZER_FILE
from model.data import Batch, Example, encode_pairs, iter_lines, token_budget_ends
from model.tokenizer import Tokenizer

FORMAT = 1
MANIFEST = "manifest.json"
SHARD_PAIRS = 100_000  # lines read, encoded and sorted at a time: the writer's memory, a shard's size
KINDS = ("src", "tgt", "len")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _pairs(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    """Line N of both files, read as needed; a length mismatch is an error, as in ``read_parallel``."""
    src, tgt = iter_lines(src_path), iter_lines(tgt_path)
    missing = object()
    while True:
        s, t = next(src, missing), next(tgt, missing)
        if s is missing and t is missing:
            return
        if s is missing or t is missing:
            raise ValueError(f"{src_path} and {tgt_path} have different numbers of lines")
        yield s, t


def write_shards(
    tokenizer: Tokenizer,
    src_path: str | Path,
    tgt_path: str | Path,
    out: str | Path,
    max_length: int,
    shard_pairs: int = SHARD_PAIRS,
    seed: int = 0,
) -> dict[str, Any]:
    """Write the shards of one training split into ``out`` (new or empty); returns the manifest."""
    src_path, tgt_path, out = Path(src_path), Path(tgt_path), Path(out)
    if (out / MANIFEST).exists():
        raise FileExistsError(f"{out} already holds shards ({MANIFEST}): write to a new folder")
    out.mkdir(parents=True, exist_ok=True)
    dtype = np.uint16 if tokenizer.vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32
    shards, read = [], 0
    pairs = _pairs(src_path, tgt_path)
    while chunk := list(islice(pairs, shard_pairs)):
        read += len(chunk)
        examples = encode_pairs(tokenizer, [s for s, _ in chunk], [t for _, t in chunk], max_length)
        if not examples:
            continue
        random.Random(seed + len(shards)).shuffle(examples)  # equal lengths in no fixed order, as make_batches
        # by the longer side first, the width a batch is padded to: on the general corpus's 100k-pair shards this
        # packs 7.5% fewer batches than make_batches' (source, target) order (which in-memory runs keep)
        examples.sort(key=lambda e: (max(len(e.src), len(e.tgt)), len(e.src), len(e.tgt)))
        name = f"{len(shards):05d}"
        arrays = {
            "src": np.fromiter((i for e in examples for i in e.src), dtype=dtype),
            "tgt": np.fromiter((i for e in examples for i in e.tgt), dtype=dtype),
            "len": np.array([(len(e.src), len(e.tgt)) for e in examples], dtype=np.int32),
        }
        files = {}
        for kind, array in arrays.items():
            path = out / f"{name}.{kind}.npy"
            np.save(path, array)
            files[kind] = {"file": path.name, "bytes": path.stat().st_size, "sha256": file_sha256(path)}
        shards.append({"name": name, "pairs": len(examples), "files": files})
    (out / TOKENIZER_FILE).write_bytes(tokenizer.path.read_bytes())
    manifest = {
        "format": FORMAT,
        "source": str(src_path),
        "target": str(tgt_path),
        "tokenizer_sha256": file_sha256(out / TOKENIZER_FILE),
        "vocab_size": tokenizer.vocab_size,
        "dtype": np.dtype(dtype).name,
        "max_length": max_length,
        "shard_pairs": shard_pairs,
        "seed": seed,
        "read": read,
        "pairs": sum(s["pairs"] for s in shards),
        "dropped": read - sum(s["pairs"] for s in shards),  # empty or longer than max_length
        "shards": shards,
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(out / MANIFEST)  # written last: a folder with a manifest holds every shard it names
    return manifest


class ShardReader:
    """A shard folder, opened: the manifest checked (format, file sizes, and the run's tokenizer when given),
    one shard memory-mapped at a time."""

    def __init__(self, folder: str | Path, tokenizer: Tokenizer | None = None) -> None:
        self.folder = Path(folder)
        path = self.folder / MANIFEST
        if not path.is_file():
            raise FileNotFoundError(f"{self.folder}: no {MANIFEST}; `python -m model.cli shard` writes shard folders")
        text = path.read_text()
        self.manifest = json.loads(text)
        if self.manifest.get("format") != FORMAT:
            raise ValueError(f"{path}: shard format {self.manifest.get('format')}, this code reads {FORMAT}")
        for shard in self.manifest["shards"]:
            for entry in shard["files"].values():
                size = (self.folder / entry["file"]).stat().st_size
                if size != entry["bytes"]:
                    raise ValueError(f"{self.folder / entry['file']}: {size} bytes, the manifest says {entry['bytes']}")
        if tokenizer is not None and file_sha256(tokenizer.path) != self.manifest["tokenizer_sha256"]:
            raise ValueError(f"{self.folder} was encoded with another tokenizer than {tokenizer.path}")
        self.pairs: int = self.manifest["pairs"]
        self.n_shards = len(self.manifest["shards"])
        self.identity = "shards " + hashlib.sha256(text.encode()).hexdigest()[:16]
        self._open: tuple[int, dict[str, np.ndarray]] | None = None

    def verify(self) -> list[str]:
        """The files whose sha256 differs from the manifest's (reads every byte: not done at every start)."""
        return [
            entry["file"]
            for shard in self.manifest["shards"]
            for entry in shard["files"].values()
            if file_sha256(self.folder / entry["file"]) != entry["sha256"]
        ]

    def _load(self, shard: int, kind: str) -> np.ndarray:
        return np.load(self.folder / self.manifest["shards"][shard]["files"][kind]["file"], mmap_mode="r")

    def lengths(self, shard: int) -> np.ndarray:
        """(pairs, 2): source and target length of each pair of the shard, specials included, in the shard's order
        (by the longer of the two, then source, then target)."""
        return self._load(shard, "len")

    def _arrays(self, shard: int) -> dict[str, np.ndarray]:
        if self._open is None or self._open[0] != shard:
            lengths = np.asarray(self.lengths(shard), dtype=np.int64)
            arrays = {"src": self._load(shard, "src"), "tgt": self._load(shard, "tgt")}
            for side, column in (("src", 0), ("tgt", 1)):
                arrays[f"{side}_offsets"] = np.concatenate([[0], np.cumsum(lengths[:, column])])
            self._open = (shard, arrays)
        return self._open[1]

    def examples(self, shard: int, first: int, end: int) -> list[Example]:
        """Pairs ``first`` to ``end`` (excluded) of a shard."""
        a = self._arrays(shard)
        so, to = a["src_offsets"], a["tgt_offsets"]
        return [
            Example(a["src"][so[i] : so[i + 1]].tolist(), a["tgt"][to[i] : to[i + 1]].tolist())
            for i in range(first, end)
        ]

    def batches(self, max_tokens: int, seed: int) -> ShardBatches:
        return ShardBatches(self, max_tokens, seed)


class ShardBatches:
    """The shards as the trainer's batch source (model/data.py ``BatchSource``): keys ``(shard, first, end)``."""

    def __init__(self, reader: ShardReader, max_tokens: int, seed: int) -> None:
        self.reader, self.max_tokens, self.seed = reader, max_tokens, seed
        self.pairs, self.identity = reader.pairs, reader.identity
        self._ends: list[list[int]] | None = None  # per shard, its batches' end indices (the same every epoch)

    def _shard_ends(self) -> list[list[int]]:
        if self._ends is None:
            self._ends = [
                token_budget_ends(self.reader.lengths(s).max(axis=1).tolist(), self.max_tokens)
                for s in range(self.reader.n_shards)
            ]
        return self._ends

    def epoch_size(self, epoch: int) -> int:
        return sum(len(ends) for ends in self._shard_ends())

    def epoch_order(self, epoch: int, start: int = 0) -> Iterator[tuple[int, int, int]]:
        shards = list(range(self.reader.n_shards))
        random.Random(self.seed + epoch).shuffle(shards)
        for shard in shards:
            ends = self._shard_ends()[shard]
            if start >= len(ends):  # a whole shard before the start: skipped without reading it
                start -= len(ends)
                continue
            firsts = [0, *ends[:-1]]
            order = np.random.default_rng([self.seed, epoch, shard]).permutation(len(ends))
            for b in order[start:].tolist():
                yield shard, firsts[b], ends[b]
            start = 0

    def batch(self, key: tuple[int, int, int]) -> Batch:
        return Batch.from_examples(self.reader.examples(*key))
