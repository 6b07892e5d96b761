"""Deterministic train / val / test split of a Tatoeba (manythings.org/anki) pair file by a hash of the English side.

Each line of the input is ``English TAB other-language [TAB attribution]``. Every pair whose English sentence
hashes into the test band goes to test, the val band to val, the rest to train, so no English sentence is in
two splits (Tatoeba often pairs one English sentence with several translations). The bands are sized so that
each of val and test holds about ``held_out`` pairs. Output: ``<split>.<lang>`` files that ``model.cli train``
and ``evaluate`` read, plus ``<split>.attribution`` where the input has that column (CC-BY 2.0 FR asks for it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from model.data import read_lines

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Pair:
    english: str
    other: str
    attribution: str


def read_tatoeba(path: str | Path) -> list[Pair]:
    """Pairs of a Tatoeba file; a byte-order mark and lines without a translation are skipped."""
    pairs = []
    for line in read_lines(path, encoding="utf-8-sig"):
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0].strip() or not fields[1].strip():
            continue
        pairs.append(Pair(fields[0].strip(), fields[1].strip(), fields[2].strip() if len(fields) > 2 else ""))
    return pairs


def english_bucket(english: str) -> float:
    """Where an English sentence falls in [0, 1): the first 8 bytes of its SHA-256, stable across runs and machines."""
    digest = hashlib.sha256(english.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_of(english: str, test_fraction: float, val_fraction: float) -> str:
    bucket = english_bucket(english)
    if bucket < test_fraction:
        return "test"
    if bucket < test_fraction + val_fraction:
        return "val"
    return "train"


def split_pairs(pairs: list[Pair], held_out: int = 1000) -> dict[str, list[Pair]]:
    fraction = held_out / max(len(pairs), 1)
    out: dict[str, list[Pair]] = {name: [] for name in SPLITS}
    for pair in pairs:
        out[split_of(pair.english, fraction, fraction)].append(pair)
    return out


def write_splits(
    splits: dict[str, list[Pair]], out_dir: str | Path, other_lang: str, english_lang: str = "en"
) -> dict[str, int]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, pairs in splits.items():
        (out_dir / f"{name}.{english_lang}").write_text("".join(p.english + "\n" for p in pairs), encoding="utf-8")
        (out_dir / f"{name}.{other_lang}").write_text("".join(p.other + "\n" for p in pairs), encoding="utf-8")
        if any(p.attribution for p in pairs):
            (out_dir / f"{name}.attribution").write_text("".join(p.attribution + "\n" for p in pairs), "utf-8")
    counts = {name: len(pairs) for name, pairs in splits.items()}
    (out_dir / "split.json").write_text(json.dumps({"counts": counts, "rule": __doc__.split("\n\n")[1]}, indent=2))
    return counts
