"""One training folder from several parallel corpora: training splits concatenated (each repeated ``weight``
times, to oversample a small or important corpus), validation splits concatenated (the run's checkpoint
choice then weighs every corpus), and every split of every corpus kept under ``<corpus>.<split>`` so
``model.cli evaluate --split <corpus>.<split>`` scores each domain on its own.

Example: Multi30k (captions) and Tatoeba (everyday phrases) for de-en, Multi30k twice::

    python -m model.cli mix --out runs/data/de-en-mix --source de --target en \\
        --corpus multi30k=../shared/data/multi30k:2 --corpus tatoeba=runs/data/tatoeba-de:1
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from model.data import read_parallel


@dataclass(frozen=True)
class Corpus:
    name: str
    folder: Path
    weight: int = 1  # how many times its training split enters the mix

    @classmethod
    def parse(cls, spec: str) -> Corpus:
        """``name=folder[:weight]``."""
        name, _, folder = spec.partition("=")
        weight = "1"
        head, colon, tail = folder.rpartition(":")
        if colon and tail.isdigit():
            folder, weight = head, tail
        if not name or not folder or int(weight) < 1:
            raise ValueError(f"corpus {spec!r}: expected name=folder[:weight] with weight >= 1")
        return cls(name, Path(folder), int(weight))


def splits_of(folder: Path, lang: str) -> list[str]:
    """Prefixes of the ``<prefix>.<lang>`` files in a corpus folder."""
    return sorted(p.name[: -len(lang) - 1] for p in folder.glob(f"*.{lang}"))


def mix(
    corpora: list[Corpus], out: str | Path, source: str, target: str, train: str = "train", valid: str = "val"
) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mixed: dict[str, tuple[list[str], list[str]]] = {train: ([], []), valid: ([], [])}
    counts: dict[str, int] = {}
    for corpus in corpora:
        for split in splits_of(corpus.folder, source):
            src, tgt = read_parallel(corpus.folder, split, source, target)
            _write(out, f"{corpus.name}.{split}", source, target, src, tgt)
            counts[f"{corpus.name}.{split}"] = len(src)
            if split in mixed:
                times = corpus.weight if split == train else 1
                mixed[split][0].extend(src * times)
                mixed[split][1].extend(tgt * times)
    for split, (src, tgt) in mixed.items():
        _write(out, split, source, target, src, tgt)
        counts[split] = len(src)
    manifest = {
        "corpora": [{"name": c.name, "folder": str(c.folder), "weight": c.weight} for c in corpora],
        "counts": counts,
    }
    (out / "mix.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _write(out: Path, prefix: str, source: str, target: str, src: list[str], tgt: list[str]) -> None:
    (out / f"{prefix}.{source}").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (out / f"{prefix}.{target}").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")
