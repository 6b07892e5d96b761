"""Readers of the corpora that are not plain ``<file>.<src>`` / ``<file>.en`` pairs (model/prepare.py's steps 1-2).

Every reader returns pairs as (foreign text, English text), whatever the corpus's original direction: the mix
(model/prepare.py) turns each pair into the directions its corpus allows.

- ``wiki``: wiki-zh-en's TSV (page title, two section titles, Chinese sentence, English sentence); its own
  ``train`` / ``dev`` / test files are the splits;
- ``wmt``: WMT21-23 test sets, ``<set>.<pair>.src.<l>`` with one or more ``<set>.<pair>.ref.<id>.<l>``: one pair
  per reference; which sets are validation or test is the recipe's (stems ``<set>.<pair>``);
- ``hyp``: research systems' outputs of those sets, ``<set>.<pair>.hyp.<system>.<l>``, paired with the set's
  source read from the ``wmt`` folder: synthetic targets (sequence-level distillation), one pair per system;
- ``bridge-tatoeba`` / ``bridge-wmt``: pairs between two foreign languages (German-Chinese) joined through the
  same English sentence: two Tatoeba files' translations of one English sentence, or two WMT sets' references of one
  English source (newstest2021 en-de and en-zh translate the same 1,002 English sentences); every combination;
- ``freedict``: the FreeDict German-English dictionary as Debian's ``dict-freedict-deu-eng`` installs it (dictd
  format: ``freedict-deu-eng.index`` beside ``freedict-deu-eng.dict.dz``): each headword (a word, a phrase or an
  example sentence) with its first translation, entries in dictionary notation (etw., jdm., sth., sb.) skipped.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from model.corpus_split import read_tatoeba
from model.data import read_lines

Pairs = list[tuple[str, str]]
_WMT_FILE = re.compile(r"^(?P<stem>[^.]+\.(?P<src>[a-z]{2})-(?P<tgt>[a-z]{2}))\.(?P<kind>src|ref|hyp)\.")


def read_wiki(path: Path) -> dict[str, Pairs]:
    """wiki-zh-en: ``train`` -> train, ``dev`` -> val, both test files -> test."""
    files = {"train": ["train.zh-en"], "val": ["dev.zh-en"], "test": ["zh2en-test.zh-en", "en2zh-test.zh-en"]}
    out: dict[str, Pairs] = {}
    for split, names in files.items():
        out[split] = []
        for name in names:
            for line in read_lines(path / name):
                cells = line.split("\t")
                if len(cells) >= 5:
                    out[split].append((cells[3], cells[4]))
    return out


def wmt_stems(path: Path, language: str) -> list[str]:
    """The ``<set>.<pair>`` stems of a WMT folder that pair ``language`` with English, sorted."""
    stems = set()
    for file in path.iterdir():
        m = _WMT_FILE.match(file.name)
        if m and {m["src"], m["tgt"]} == {language, "en"}:
            stems.add(m["stem"])
    return sorted(stems)


def _oriented(stem: str, language: str, source: list[str], target: list[str]) -> Pairs:
    """(foreign, English) pairs of a set whose lines go source -> target in the stem's direction."""
    if len(source) != len(target):
        raise ValueError(f"{stem}: {len(source)} source lines but {len(target)} target lines")
    foreign_first = stem.endswith(f".{language}-en")
    return list(zip(source, target, strict=True)) if foreign_first else list(zip(target, source, strict=True))


def read_wmt(path: Path, language: str, stems: list[str]) -> Pairs:
    """One pair per source line and reference of each stem (``newstest2021.en-de`` has three references)."""
    pairs: Pairs = []
    for stem in stems:
        src_lang, tgt_lang = stem.split(".")[-1].split("-")
        source = read_lines(path / f"{stem}.src.{src_lang}")
        for ref in sorted(path.glob(f"{stem}.ref.*.{tgt_lang}")):
            pairs.extend(_oriented(stem, language, source, read_lines(ref)))
    return pairs


def read_hyp(path: Path, sources: Path, language: str, exclude: set[str]) -> dict[str, Pairs]:
    """System outputs as synthetic pairs, by stem: each system's hypotheses paired with the set's source (read from
    ``sources``, the ``wmt`` folder); stems in ``exclude`` (a validation or test set) are skipped."""
    out: dict[str, Pairs] = {}
    for stem in wmt_stems(path, language):
        if stem in exclude:
            continue
        src_lang, tgt_lang = stem.split(".")[-1].split("-")
        source = read_lines(sources / f"{stem}.src.{src_lang}")
        pairs: Pairs = []
        for hyp in sorted(path.glob(f"{stem}.hyp.*.{tgt_lang}")):
            pairs.extend(_oriented(stem, language, source, read_lines(hyp)))
        out[stem] = pairs
    return out


def read_bridge_tatoeba(path: Path, other: Path) -> list[tuple[str, str, str]]:
    """(first file's translation, second file's translation, English) for each English sentence both translate."""
    others: dict[str, list[str]] = {}
    for pair in read_tatoeba(other):
        others.setdefault(pair.english, []).append(pair.other)
    return [(p.other, o, p.english) for p in read_tatoeba(path) for o in others.get(p.english, [])]


def read_bridge_wmt(path: Path, first: str, second: str) -> list[tuple[str, str, str]]:
    """(``first`` reference, ``second`` reference, English source) for the English sources that two sets of one
    year, ``<set>.en-<first>`` and ``<set>.en-<second>``, both translate, every reference of each."""
    triples: list[tuple[str, str, str]] = []
    for stem in wmt_stems(path, first):
        test_set, pair = stem.rsplit(".", 1)
        twin = f"{test_set}.en-{second}"
        if pair != f"en-{first}" or not (path / f"{twin}.src.en").exists():
            continue
        refs = {}
        for name, lang in ((stem, first), (twin, second)):
            source = read_lines(path / f"{name}.src.en")
            for ref in sorted(path.glob(f"{name}.ref.*.{lang}")):
                for english, text in zip(source, read_lines(ref), strict=True):
                    refs.setdefault(english, {}).setdefault(lang, []).append(text)
        for english, by_lang in refs.items():
            triples += [(a, b, english) for a in by_lang.get(first, []) for b in by_lang.get(second, [])]
    return triples


def direction_of(stem: str) -> str:
    """``newstest2021.en-de`` -> ``en-de``."""
    return stem.split(".")[-1]


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_TAGS = re.compile(r"\s*(<[^>]*>|\[[^\]]*\]|\{[^}]*\})")
_NOTATION = re.compile(r"\b(etw|jdm|jdn|jds|jd|sth|sb|so|sth's|sb's)\.", re.IGNORECASE)


def _b64(text: str) -> int:
    value = 0
    for ch in text:
        value = value * 64 + _B64.index(ch)
    return value


def read_freedict(dict_file: Path) -> Pairs:
    """(German headword, English translation) of a dictd dictionary (``X.dict.dz`` with ``X.index`` beside it)."""
    index = dict_file.with_name(dict_file.name.removesuffix(".dict.dz") + ".index")
    with gzip.open(dict_file) as f:
        raw = f.read()
    pairs: Pairs = []
    for line in read_lines(index):
        cells = line.split("\t")
        if len(cells) != 3 or cells[0].startswith("00-database"):
            continue
        start, length = _b64(cells[1]), _b64(cells[2])
        entry = raw[start : start + length].decode("utf-8", errors="replace").split("\n")
        if len(entry) < 2:
            continue
        head = _TAGS.sub("", entry[0].split(" /", 1)[0]).strip()
        gloss = _TAGS.sub("", entry[1]).strip()
        if not head.endswith((".", "!", "?")):  # a word or phrase: its first translation
            gloss = gloss.split(", ")[0].split("; ")[0].strip()
        if head and gloss and not _NOTATION.search(head + " " + gloss) and "\ufffd" not in head + gloss:
            pairs.append((head, gloss))
    return pairs
