"""Data preparation: corpora in, one training folder out, every count recorded (``python -m model.cli prepare``).

A recipe (JSON, e.g. ``configs/data/general.json``) names the corpora, how to read each, which of its files
are validation or test, and its weight in the training mix. The steps, in order, each counted per corpus:

1. read: ``parallel`` (``<file>.<src>`` / ``<file>.en`` line pairs), ``tatoeba`` (``English TAB other``) or
   ``cedict`` (CC-CEDICT entries as headword -> first plain English gloss);
2. split: the recipe's val / test files, or a hash band of the English side (``held_out`` pairs each, as
   ``model.cli split`` does), the rest train;
3. normalise (core/normalize.py): NFC, ASCII quotes, whitespace, Chinese in Simplified script;
4. filter (training pairs only; validation and test sets stay whole): an empty side, a side over
   ``max_chars``, a target/source length ratio outside the source language's band, a target that copies a
   long source (files are split at "\\n" only: model/data.py ``read_lines``);
5. de-duplicate: a training pair seen before (in any corpus) is dropped, and so is every training pair whose
   source, or whose long target, is a validation or test sentence of any corpus (no leak into evaluation);
6. mix: each corpus's training pairs repeated ``weight`` times (a fraction takes a deterministic sample),
   shuffled; a validation sample of ``valid_sample`` pairs per corpus for the checks during training.

Output: ``train.<s>`` / ``train.en`` and ``val.<s>`` / ``val.en`` (``<s>`` is the source language, or
``src`` when the corpora have several), ``<corpus>.<split>.<lang>`` for every split of every corpus (what
``evaluate --split <corpus>.<split>`` scores), and ``prepare.json`` with the recipe and every count.
The same recipe and inputs give byte-identical output.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.language import latin_words, uncopied_latin
from core.normalize import NORMALIZATION_VERSION, normalize_for
from model.augment import all_caps, with_placeholders
from model.corpus_split import read_tatoeba, split_of
from model.data import read_lines, read_parallel
from model.directions import held_key, tagged, wrong_language
from model.readers import (
    direction_of,
    read_bridge_tatoeba,
    read_bridge_wmt,
    read_freedict,
    read_hyp,
    read_wiki,
    read_wmt,
    wmt_stems,
)

TARGET = "en"
SPLITS = ("train", "val", "test")
READERS = ("parallel", "tatoeba", "cedict", "wiki", "wmt", "hyp", "freedict", "bridge-tatoeba", "bridge-wmt")
# target chars / source chars, 0.1% - 99.9% of the clean corpora (Multi30k, Tatoeba, TICO-19) widened a little
RATIO_BANDS = {"de": (0.4, 2.5), "zh": (0.9, 12.0)}
# Chinese chars / German chars of the Tatoeba German-Chinese bridge (0.1%: 0.11, 99.9%: 0.62), widened a little
PAIR_RATIO_BANDS = {"de-zh": (0.1, 0.8)}
RATIO_MIN_CHARS = 16  # shorter pairs ("Hi." / "Hallo!") are not ratio-checked
COPY_MIN_CHARS = 16
CHINESE_LATIN = ("", "copied", "none")  # CorpusSpec.chinese_latin


@dataclass
class CorpusSpec:
    name: str
    source: str
    reader: str  # one of READERS
    path: str  # under --data; "./..." under the working directory (a corpus we made: runs/bt/...); or absolute
    target: str = TARGET  # the other side of its pairs: English, or Chinese for a German-Chinese bridge
    other: str = ""  # bridge-tatoeba: the second Tatoeba file (the first is ``path``)
    weight: float = 1.0
    files: list[str] | str = "*"  # parallel: file stems of the training split ("*": every stem not val/test)
    val: list[str] = field(default_factory=list)  # parallel: stems that are the validation split
    test: list[str] = field(default_factory=list)
    held_out: int = 0  # pairs each in val and test by a hash band of the English side (when no stems say)
    # the directions its training pairs go in (multi-direction recipes): [] = both, <source>-en and en-<source>
    directions: list[str] = field(default_factory=list)
    sources: str = ""  # hyp: the folder of the sets' sources (the wmt corpus's path)
    cap: int = 0  # at most this many training pairs (a deterministic sample; dictionaries), 0 = all
    # a symbol before the source text of the directions this corpus's source side is the source of: "<bt>" for
    # back-translated (synthetic) sources, so the model tells them from real ones (Caswell et al. 2019)
    source_tag: str = ""
    # Latin-script words (2+ letters) allowed in the Chinese side of synthetic Chinese (the model's own
    # English->Chinese), pairs with others dropped: "copied" = only words the other side holds (core/language.py
    # ``uncopied_latin``: no German word leaked in), "none" = none at all (captions, where the model also leaves
    # English words untranslated); "" = no check
    chinese_latin: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CorpusSpec:
        spec = cls(**data)
        if spec.reader not in READERS:
            raise ValueError(f"corpus {spec.name}: unknown reader {spec.reader!r}; choose from {READERS}")
        if spec.weight < 0:
            raise ValueError(f"corpus {spec.name}: weight must be >= 0")
        both = [f"{spec.source}-{spec.target}", f"{spec.target}-{spec.source}"]
        if not set(spec.directions) <= set(both):
            raise ValueError(f"corpus {spec.name}: directions must be among {both}, got {spec.directions}")
        spec.directions = spec.directions or both
        if spec.chinese_latin not in CHINESE_LATIN:
            raise ValueError(f"corpus {spec.name}: chinese_latin must be one of {CHINESE_LATIN}")
        if spec.chinese_latin and "zh" not in (spec.source, spec.target):
            raise ValueError(f"corpus {spec.name}: chinese_latin needs a Chinese side")
        return spec


@dataclass
class Recipe:
    name: str
    corpora: list[CorpusSpec]
    valid_sample: int = 400
    max_chars: int = 500
    seed: int = 1
    simplify_chinese: bool = True
    # multi-direction output (model/directions.py): the directions trained, each source line tagged with its
    # target language; [] = every corpus into English, untagged (the single-direction layout)
    directions: list[str] = field(default_factory=list)
    direction_weights: dict[str, float] = field(default_factory=dict)  # oversampling of weaker directions
    language_id: bool = False  # drop training pairs whose sides lingua finds in another language
    # extra copies of a share of each direction's pairs (model/augment.py): {"placeholders": 0.1, "all_caps": 0.01}
    augment: dict[str, float] = field(default_factory=dict)
    near_duplicates: bool = False  # held-out sentences matched ignoring case, spaces and punctuation too

    @classmethod
    def load(cls, path: str | Path) -> Recipe:
        data = json.loads(Path(path).read_text())
        corpora = [CorpusSpec.from_dict(c) for c in data.pop("corpora")]
        names = [c.name for c in corpora]
        if len(set(names)) != len(names):
            raise ValueError(f"corpus names repeat: {names}")
        return cls(corpora=corpora, **data)

    @property
    def sources(self) -> list[str]:
        return sorted({c.source for c in self.corpora})

    @property
    def mixed_suffix(self) -> str:
        if self.directions:
            return "src"
        return self.sources[0] if len(self.sources) == 1 else "src"

    @property
    def mixed_target(self) -> str:
        return "tgt" if self.directions else TARGET


Pairs = list[tuple[str, str]]


# --- 1-2: reading and splitting ------------------------------------------------------------------------


def corpus_path(spec: CorpusSpec, root: Path) -> Path:
    """Where the corpus is: ``root`` (--data) / its path, but a path that starts with ``./`` is the working
    directory's (a corpus made here, e.g. back-translations in runs/bt/)."""
    return Path(spec.path) if spec.path.startswith("./") else root / spec.path


def read_corpus(spec: CorpusSpec, root: Path) -> dict[str, Pairs]:
    """The corpus's pairs by split, as read (not yet normalised)."""
    path = corpus_path(spec, root)
    if spec.reader == "tatoeba":
        return _hash_split([(p.other, p.english) for p in read_tatoeba(path)], spec.held_out)
    if spec.reader == "bridge-tatoeba":  # split by the English sentence the two translations share
        triples = read_bridge_tatoeba(path, root / spec.other)
        fraction = spec.held_out / max(len(triples), 1)
        out: dict[str, Pairs] = {s: [] for s in SPLITS}
        for a, b, english in triples:
            out[split_of(english, fraction, fraction)].append((a, b))
        return out
    if spec.reader == "bridge-wmt":
        return {"train": [(a, b) for a, b, _ in read_bridge_wmt(path, spec.source, spec.target)]}
    if spec.reader == "cedict":
        return {"train": _capped(read_cedict(path), spec)}
    if spec.reader == "freedict":  # files: "sentences" (its example sentences), "words" (the rest), or "*" (all)
        pairs = read_freedict(path)
        if spec.files != "*":
            pairs = [p for p in pairs if p[0].endswith((".", "!", "?")) == (spec.files == "sentences")]
        return {"train": _capped(pairs, spec)}
    if spec.reader == "wiki":
        return read_wiki(path)
    if spec.reader == "wmt":
        stems = _train_stems_wmt(spec, path)
        return {split: read_wmt(path, spec.source, names) for split, names in
                (("train", stems), ("val", spec.val), ("test", spec.test))}  # fmt: skip
    if spec.reader == "hyp":
        by_stem = read_hyp(path, root / spec.sources, spec.source, exclude=set(spec.val + spec.test))
        return {"train": [p for stem, pairs in by_stem.items() if direction_of(stem) in spec.directions for p in pairs]}
    if not any(path.glob(f"*.{spec.source}")):
        raise FileNotFoundError(f"corpus {spec.name}: no *.{spec.source} files in {path}")
    out = {
        "train": _read_stems(path, _train_stems(spec, root), spec.source),
        "val": _read_stems(path, spec.val, spec.source),
        "test": _read_stems(path, spec.test, spec.source),
    }
    if spec.held_out and not spec.val and not spec.test:
        out = _hash_split(out["train"], spec.held_out)
    return out


def _train_stems_wmt(spec: CorpusSpec, path: Path) -> list[str]:
    stems = wmt_stems(path, spec.source)
    return [s for s in stems if s not in spec.val + spec.test] if spec.files == "*" else list(spec.files)


def _capped(pairs: Pairs, spec: CorpusSpec) -> Pairs:
    """At most ``spec.cap`` pairs, the ones whose hash is lowest (deterministic, spread over the file)."""
    if not spec.cap or len(pairs) <= spec.cap:
        return pairs
    ranked = sorted(range(len(pairs)), key=lambda i: _unit(f"{spec.name}:{pairs[i][0]}\t{pairs[i][1]}"))
    return [pairs[i] for i in sorted(ranked[: spec.cap])]


def _read_stems(folder: Path, stems: list[str], source: str) -> Pairs:
    pairs: Pairs = []
    for stem in stems:
        src, tgt = read_parallel(folder, stem, source, TARGET)
        pairs.extend(zip(src, tgt, strict=True))
    return pairs


def _hash_split(pairs: Pairs, held_out: int) -> dict[str, Pairs]:
    fraction = held_out / max(len(pairs), 1)
    out: dict[str, Pairs] = {s: [] for s in SPLITS}
    for src, tgt in pairs:
        out[split_of(tgt.strip(), fraction, fraction)].append((src, tgt))
    return out


_PAREN = re.compile(r"\s*\([^)]*\)")
_SKIP_GLOSS = re.compile(
    r"^(variant of|old variant|archaic variant|japanese variant|erhua variant|see |surname |cl:|used in |"
    r"abbr\. |also written|also pr\.|pr\. |radical |classifier|\(old\)|\(archaic\)|sb |sth )",
    re.IGNORECASE,
)


def read_cedict(path: Path) -> Pairs:
    """CC-CEDICT as pairs: the Simplified headword and its first plain gloss (no variant, surname, classifier
    or cross-reference notes; parenthetical remarks dropped; glosses over 60 characters skipped)."""
    pairs: Pairs = []
    for line in read_lines(path):
        if line.startswith("#") or "/" not in line:
            continue
        head, _, glosses = line.partition("/")
        words = head.split(" ")
        if len(words) < 2 or not any("\u4e00" <= ch <= "\u9fff" for ch in words[1]):
            continue
        for gloss in glosses.split("/"):
            gloss = _PAREN.sub("", gloss).strip()
            if gloss and not _SKIP_GLOSS.match(gloss) and len(gloss) <= 60 and "|" not in gloss:
                pairs.append((words[1], gloss))
                break
    return pairs


# --- 3-4: normalising and filtering --------------------------------------------------------------------


def _outside_band(src: str, tgt: str, source: str, target: str = TARGET) -> bool:
    if max(len(src), len(tgt)) < RATIO_MIN_CHARS:
        return False
    band = RATIO_BANDS.get(source) if target == TARGET else PAIR_RATIO_BANDS.get(f"{source}-{target}")
    low, high = band or (0.4, 2.5)
    return not low <= len(tgt) / max(len(src), 1) <= high


def clean(pairs: Pairs, source: str, recipe: Recipe, counts: Counter, target: str = TARGET) -> Pairs:
    """Normalised pairs that pass the filters; ``counts`` gets one entry per reason a pair was dropped."""
    kept: Pairs = []
    for raw_src, raw_tgt in pairs:
        src = normalize_for(raw_src, source, recipe.simplify_chinese)
        tgt = normalize_for(raw_tgt, target, recipe.simplify_chinese)
        if not src or not tgt:
            counts["empty"] += 1
        elif len(src) > recipe.max_chars or len(tgt) > recipe.max_chars:
            counts["too_long"] += 1
        elif src == tgt and len(src) >= COPY_MIN_CHARS:
            counts["copy"] += 1
        elif _outside_band(src, tgt, source, target):
            counts["ratio"] += 1
        else:
            kept.append((src, tgt))
    if recipe.language_id and kept:
        wrong_src = wrong_language([s for s, _ in kept], source)
        wrong_tgt = wrong_language([t for _, t in kept], target)
        counts["language"] += sum(a or b for a, b in zip(wrong_src, wrong_tgt, strict=True))
        kept = [p for p, a, b in zip(kept, wrong_src, wrong_tgt, strict=True) if not (a or b)]
    return kept


def _chinese_latin(pairs: Pairs, spec: CorpusSpec, counts: Counter) -> Pairs:
    """The pairs whose Chinese side has only the Latin-script words ``spec.chinese_latin`` allows."""
    chinese = 0 if spec.source == "zh" else 1
    if spec.chinese_latin == "copied":
        kept = [p for p in pairs if not uncopied_latin(p[chinese], p[1 - chinese])]
    else:
        kept = [p for p in pairs if not latin_words(p[chinese])]
    counts["latin_words"] += len(pairs) - len(kept)
    return kept


def normalized(pairs: Pairs, source: str, recipe: Recipe, target: str = TARGET) -> Pairs:
    """Validation and test pairs: normalised, never filtered (an evaluation set stays whole)."""
    return [(normalize_for(s, source, recipe.simplify_chinese), normalize_for(t, target, recipe.simplify_chinese))
            for s, t in pairs]  # fmt: skip


# --- 5-6: de-duplication and the mix -------------------------------------------------------------------


def _weighted(pairs: Pairs, weight: float, seed: str) -> Pairs:
    whole, fraction = int(weight), weight - int(weight)
    extra = [p for p in pairs if _unit(seed + p[0] + "\t" + p[1]) < fraction]
    return pairs * whole + extra


def _unit(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64


def _spread_sample(pairs: Pairs, n: int) -> Pairs:
    """``n`` pairs evenly spread over the list (documents stay represented), all when there are fewer."""
    if len(pairs) <= n:
        return list(pairs)
    return [pairs[i * len(pairs) // n] for i in range(n)]


def prepare(recipe: Recipe, root: str | Path, out: str | Path) -> dict[str, Any]:
    root, out = Path(root), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cleaned: dict[str, dict[str, Pairs]] = {}
    report: dict[str, Any] = {}
    for spec in recipe.corpora:
        dropped: Counter = Counter()
        splits = read_corpus(spec, root)
        read_counts = {s: len(p) for s, p in splits.items()}
        cleaned[spec.name] = {
            split: clean(pairs, spec.source, recipe, dropped, spec.target)
            if split == "train"
            else normalized(pairs, spec.source, recipe, spec.target)
            for split, pairs in splits.items()
        }
        if spec.chinese_latin:
            cleaned[spec.name]["train"] = _chinese_latin(cleaned[spec.name]["train"], spec, dropped)
        report[spec.name] = {"source": spec.source, "weight": spec.weight, "read": read_counts, "dropped": dropped}

    # every held-out sentence, either side (an en->x set's English is its source): exact, and with near_duplicates
    # also ignoring case, spaces and punctuation
    key = held_key if recipe.near_duplicates else (lambda text: text)
    held = {key(text) for c in cleaned.values() for split in ("val", "test") for pair in c.get(split, [])
            for text in pair if len(text) >= 20} - {""}  # fmt: skip
    # and exactly, whatever their length: held-out sources, and both sides of held-out pairs without English (a
    # German-Chinese test pair's Chinese is not seen as any pair's target)
    held_src = {s for c in cleaned.values() for split in ("val", "test") for s, _ in c.get(split, [])}
    held_src |= {t for spec in recipe.corpora if spec.target != TARGET for split in ("val", "test")
                 for _, t in cleaned[spec.name].get(split, [])}  # fmt: skip
    seen: set[tuple[str, str]] = set()
    mixed: Pairs = []
    valid: Pairs = []
    for spec in recipe.corpora:
        counts = report[spec.name]
        train: Pairs = []
        for pair in cleaned[spec.name]["train"]:
            if pair[0] in held_src or pair[1] in held_src or key(pair[0]) in held or key(pair[1]) in held:
                counts["dropped"]["in_val_or_test"] += 1
            elif pair in seen:
                counts["dropped"]["duplicate"] += 1
            else:
                seen.add(pair)
                train.append(pair)
        cleaned[spec.name]["train"] = train
        for split, pairs in cleaned[spec.name].items():
            if pairs:
                _write(out, f"{spec.name}.{split}", spec.source, pairs, spec.target)
        counts["kept"] = {s: len(p) for s, p in cleaned[spec.name].items() if p or s == "train"}
        counts["dropped"] = dict(sorted(counts["dropped"].items()))
        val_sample = _spread_sample(cleaned[spec.name].get("val", []), recipe.valid_sample)
        if not recipe.directions:
            in_mix = _weighted(train, spec.weight, f"{recipe.seed}:{spec.name}:")
            counts["in_mix"] = len(in_mix)
            counts["target_words_in_mix"] = sum(len(t.split()) for _, t in in_mix)
            mixed.extend(in_mix)
            valid.extend(val_sample)
            continue
        counts["in_mix"], counts["target_words_in_mix"] = {}, {}
        for direction in [d for d in spec.directions if d in recipe.directions]:
            weight = spec.weight * recipe.direction_weights.get(direction, 1.0)
            pairs = _oriented(train, direction, spec.source)
            in_mix = _weighted(pairs, weight, f"{recipe.seed}:{spec.name}:{direction}:")
            extra = augmented(pairs, direction, recipe.augment, f"{recipe.seed}:{spec.name}:{direction}:")
            counts.setdefault("augmented", {})[direction] = {kind: len(v) for kind, v in extra.items()}
            in_mix += [pair for copies in extra.values() for pair in copies]
            counts["in_mix"][direction] = len(in_mix)
            counts["target_words_in_mix"][direction] = sum(len(t.split()) for _, t in in_mix)
            tag = f"{spec.source_tag} " if spec.source_tag and direction.startswith(f"{spec.source}-") else ""
            mixed.extend((tagged(tag + src, direction), tgt) for src, tgt in in_mix)
            valid.extend((tagged(src, direction), tgt) for src, tgt in _oriented(val_sample, direction, spec.source))
    random.Random(recipe.seed).shuffle(mixed)
    _write(out, "train", recipe.mixed_suffix, mixed, recipe.mixed_target)
    _write(out, "val", recipe.mixed_suffix, valid, recipe.mixed_target)
    manifest = {
        "recipe": recipe.name,
        "data_root": str(root),
        "source_suffix": recipe.mixed_suffix,
        "target_suffix": recipe.mixed_target,
        "directions": recipe.directions,
        "direction_weights": recipe.direction_weights,
        "corpora": report,
        "train": len(mixed),
        "val": len(valid),
        "rules": {
            "ratio_bands": RATIO_BANDS,
            "ratio_min_chars": RATIO_MIN_CHARS,
            "max_chars": recipe.max_chars,
            "normalization": NORMALIZATION_VERSION,
            "simplify_chinese": recipe.simplify_chinese,
            "language_id": recipe.language_id,
            "near_duplicates": recipe.near_duplicates,
            "augment": recipe.augment,
        },
    }
    (out / "prepare.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest


def _train_stems(spec: CorpusSpec, root: Path) -> list[str]:
    path = corpus_path(spec, root)
    stems = sorted(p.name[: -len(spec.source) - 1] for p in path.glob(f"*.{spec.source}"))
    return [s for s in stems if s not in spec.val + spec.test] if spec.files == "*" else list(spec.files)


def augmented(pairs: Pairs, direction: str, shares: dict[str, float], seed: str) -> dict[str, Pairs]:
    """Extra copies of the share of ``pairs`` each augmentation picks (a hash of the pair, so the same recipe picks
    the same ones): placeholders where the pair shares a span, all caps (model/augment.py)."""
    src_lang, tgt_lang = direction.split("-")
    out: dict[str, Pairs] = {}
    for kind, share in sorted(shares.items()):
        if kind not in AUGMENTATIONS:
            raise ValueError(f"unknown augmentation {kind!r}; choose from {sorted(AUGMENTATIONS)}")
        make = AUGMENTATIONS[kind]
        picked = (make(s, t, src_lang, tgt_lang) for s, t in pairs if _unit(f"{seed}{kind}:{s}\t{t}") < share)
        out[kind] = [pair for pair in picked if pair is not None]
    return out


AUGMENTATIONS = {"placeholders": with_placeholders, "all_caps": lambda s, t, _a, _b: all_caps(s, t)}


def _oriented(pairs: Pairs, direction: str, source: str) -> Pairs:
    """A corpus's (source, target) pairs as (source, target) of ``direction``: as they are when ``direction`` starts
    with the corpus's source language (``de-en`` of a German corpus), else swapped (``en-de``)."""
    return list(pairs) if direction.startswith(f"{source}-") else [(t, s) for s, t in pairs]


def _write(out: Path, prefix: str, source: str, pairs: Pairs, target: str = TARGET) -> None:
    (out / f"{prefix}.{source}").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (out / f"{prefix}.{target}").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")


def table(manifest: dict[str, Any]) -> str:
    """The counts as a Markdown table (the model card's data table)."""
    rows = [
        "| corpus | source | read (train/val/test) | dropped | kept (train/val/test) | weight | pairs in mix |"
        " target words in mix |",
        "|---|---|---|---|---|---:|---:|---:|",
    ]
    for name, c in manifest["corpora"].items():
        read = "/".join(str(c["read"].get(s, 0)) for s in SPLITS)
        kept = "/".join(str(c["kept"].get(s, 0)) for s in SPLITS)
        dropped = ", ".join(f"{k} {v}" for k, v in c["dropped"].items() if v) or "-"
        rows.append(
            f"| {name} | {c['source']} | {read} | {dropped} | {kept} | {c['weight']} | {_per_direction(c['in_mix'])} |"
            f" {_per_direction(c['target_words_in_mix'])} |"
        )
    rows.append(f"| **mix** | | | | | | **{manifest['train']:,}** | |")
    return "\n".join(rows)


def _per_direction(value: int | dict[str, int]) -> str:
    """A count, or counts per direction (multi-direction recipes) as ``de-en 1,234; en-de 1,234``."""
    if isinstance(value, dict):
        return "; ".join(f"{d} {n:,}" for d, n in value.items()) or "-"
    return f"{value:,}"
