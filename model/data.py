"""Parallel corpus reading, length filtering and token-budget batches from length buckets."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from model.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer


def read_lines(path: str | Path, encoding: str = "utf-8") -> list[str]:
    """The lines of a text file, split at "\\n" only. ``str.splitlines`` also splits at U+2028, U+0085 and
    the \\x1c-\\x1e separators, which occur inside news sentences: newstest2009 de-en has eight, and split that
    way its German side ran eight lines ahead of the English from line ~1,400 on."""
    text = Path(path).read_text(encoding=encoding)
    return text[:-1].split("\n") if text.endswith("\n") else (text.split("\n") if text else [])


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[str]:
    """The lines :func:`read_lines` returns, read one at a time (a corpus larger than memory): text mode splits
    at "\\n" (and "\\r"), never at the separators ``str.splitlines`` knows."""
    with open(path, encoding=encoding) as f:
        for line in f:
            yield line[:-1] if line.endswith("\n") else line


def read_parallel(data_dir: str | Path, prefix: str, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str]]:
    """Line N of ``prefix.src_lang`` is the translation of line N of ``prefix.tgt_lang``."""
    data_dir = Path(data_dir)
    src_path, tgt_path = data_dir / f"{prefix}.{src_lang}", data_dir / f"{prefix}.{tgt_lang}"
    for path in (src_path, tgt_path):
        if not path.is_file():
            raise FileNotFoundError(f"corpus file not found: {path}")
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}")
    return src, tgt


def split_language(data_dir: str | Path, prefix: str, preferred: str, target: str) -> str:
    """The source-language suffix of a split: ``preferred`` when ``<prefix>.<preferred>`` exists, else the one
    suffix beside the target's (a run of several source languages, ``src``, scores ``news-zh.val.zh``)."""
    data_dir = Path(data_dir)
    if (data_dir / f"{prefix}.{preferred}").is_file():
        return preferred
    suffixes = sorted(
        p.name[len(prefix) + 1 :]
        for p in data_dir.glob(f"{prefix}.*")
        if "." not in p.name[len(prefix) + 1 :] and p.name[len(prefix) + 1 :] not in (target, "attribution")
    )
    if len(suffixes) != 1:
        raise FileNotFoundError(f"no single source file for split {prefix!r} in {data_dir} (found {suffixes})")
    return suffixes[0]


@dataclass
class Example:
    src: list[int]  # source ids + eos
    tgt: list[int]  # bos + target ids + eos


def encode_pairs(tokenizer: Tokenizer, src: list[str], tgt: list[str], max_length: int | None = None) -> list[Example]:
    """Tokenize pairs; drop empty ones and (when max_length is set) those longer than max_length subwords."""
    examples = []
    for s, t in zip(tokenizer.encode_batch(src), tokenizer.encode_batch(tgt), strict=True):
        if not s or not t:
            continue
        if max_length is not None and (len(s) > max_length or len(t) > max_length):
            continue
        examples.append(Example(s + [EOS_ID], [BOS_ID] + t + [EOS_ID]))
    return examples


def pad(sequences: list[list[int]]) -> Tensor:
    width = max(len(s) for s in sequences)
    return torch.tensor([s + [PAD_ID] * (width - len(s)) for s in sequences], dtype=torch.long)


@dataclass
class Batch:
    src: Tensor  # (batch, src)
    tgt_in: Tensor  # (batch, tgt) bos + tokens
    tgt_out: Tensor  # (batch, tgt) tokens + eos
    n_tokens: int  # non-pad target tokens

    def to(self, device: torch.device) -> Batch:
        """The same batch on ``device`` (itself when it is there already)."""
        return Batch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device), self.n_tokens)

    @classmethod
    def from_examples(cls, examples: list[Example]) -> Batch:
        tgt = pad([e.tgt for e in examples])
        tgt_out = tgt[:, 1:]
        return cls(pad([e.src for e in examples]), tgt[:, :-1], tgt_out, int((tgt_out != PAD_ID).sum()))


def token_budget_ends(widths: Sequence[int], max_tokens: int) -> list[int]:
    """End indices of consecutive batches over examples in this order, each at most ``max_tokens`` padded tokens.

    ``widths[i]`` is example i's longer side (source or target); a batch is cut before the example that would
    take (its widest example) x (its count) over the budget. The one packing rule of the in-memory batches
    (:func:`make_batches`) and of the streamed shards (model/shards.py), so both batch a corpus alike.
    """
    ends: list[int] = []
    width = count = 0
    for i, own in enumerate(widths):
        w = max(width, own)
        if count and w * (count + 1) > max_tokens:
            ends.append(i)
            w, count = own, 0
        width, count = w, count + 1
    if count:
        ends.append(len(widths))
    return ends


def make_batches(examples: list[Example], max_tokens: int, seed: int | None = None) -> list[list[int]]:
    """Index lists of examples of similar length, each batch at most ``max_tokens`` padded tokens.

    Examples are sorted by length (shuffled first within equal lengths when ``seed`` is given) so that
    batches need little padding; the batch order is then shuffled with the same seed.
    """
    order = list(range(len(examples)))
    rng = random.Random(seed)
    if seed is not None:
        rng.shuffle(order)
    order.sort(key=lambda i: (len(examples[i].src), len(examples[i].tgt)))
    widths = [max(len(examples[i].src), len(examples[i].tgt)) for i in order]
    starts = [0, *token_budget_ends(widths, max_tokens)]
    batches = [order[a:b] for a, b in zip(starts, starts[1:], strict=False)]
    if seed is not None:
        rng.shuffle(batches)
    return batches


class BatchSource(Protocol):
    """Where the trainer's batches come from: each epoch, one order of batch keys that every rank computes alike
    (ranks take it in turn, model/train.py), and the batch a key stands for."""

    pairs: int  # training pairs
    identity: str  # what a checkpoint records, so a run is not resumed mid-epoch on other data

    def epoch_size(self, epoch: int) -> int:
        """Batches in the epoch's order."""
        ...

    def epoch_order(self, epoch: int, start: int = 0) -> Iterator[Any]:
        """The epoch's batch keys from position ``start`` on, without building the ones before it."""
        ...

    def batch(self, key: Any) -> Batch: ...


IN_MEMORY = "in-memory"  # the identity checkpoints wrote before it named the pairs: any in-memory data
IDENTITY_STRIDE = 997  # every 997th pair goes into an in-memory identity's digest (any new corpus moves them all)


class ExampleBatches:
    """The training pairs held in memory (the default): epoch e's order is ``make_batches`` of all of them with
    seed ``seed + e``, as it always was, so runs and checkpoints from before streamed shards resume alike."""

    def __init__(self, examples: list[Example], max_tokens: int, seed: int) -> None:
        self.examples, self.max_tokens, self.seed = examples, max_tokens, seed
        self.pairs = len(examples)
        digest = hashlib.sha256()
        for e in examples[::IDENTITY_STRIDE]:
            digest.update(repr((e.src, e.tgt)).encode())
        self.identity = f"{IN_MEMORY} {self.pairs} pairs {digest.hexdigest()[:16]}"
        self._cached: tuple[int, list[list[int]]] | None = None  # the last epoch's order

    def _order(self, epoch: int) -> list[list[int]]:
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, make_batches(self.examples, self.max_tokens, seed=self.seed + epoch))
        return self._cached[1]

    def epoch_size(self, epoch: int) -> int:
        return len(self._order(epoch))

    def epoch_order(self, epoch: int, start: int = 0) -> Iterator[list[int]]:
        return iter(self._order(epoch)[start:])

    def batch(self, key: list[int]) -> Batch:
        return Batch.from_examples([self.examples[i] for i in key])
