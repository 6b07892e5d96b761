"""Build service/serving/zh_names.tsv, the Chinese-name table of service/serving/names.py, from CC-CEDICT.

    python scripts/zh_names.py ../shared/data/cc-cedict/cc-cedict.txt [-o service/serving/zh_names.tsv]

CC-CEDICT itself: https://www.mdbg.net/chinese/dictionary?page=cc-cedict (the built table used its release of
2025-10-02, 123,999 entries).

An entry is a name when its headword is Chinese characters only, its pinyin is capitalised (CC-CEDICT's mark of a
proper noun: ``[Hang2 zhou1]``) and its first gloss begins with the name in English ("Hangzhou subprovincial
city ...", "Alibaba, PRC e-commerce company", "Donald Trump (1946–), ..."), or the gloss says "surname X". A gloss
"see X[...]" takes X's English. Kinds: ``person`` (a gloss with a year of birth), ``surname``, ``name`` (places,
organisations and the rest). A headword whose first entry is an ordinary
word is left out; one with several name entries lists each one's English in CC-CEDICT's order, but an entry of
fiction or legend last (阿里巴巴: Alibaba, the company, before Ali Baba, "character from The Arabian Nights"). A
person written in English by another name than its pinyin (a foreign name: 特朗普 -> Donald Trump) is found by
its last word first (Trump), as English text mostly writes it. Only the derived table is committed, with
CC-CEDICT's licence (CC BY-SA 4.0) and credit in its header.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

LINE = re.compile(r"^(\S+) (\S+) \[([^\]]*)\] /(.*)/\s*$")
HAN = re.compile(r"^[\u3400-\u9fff\uf900-\ufaff·]{2,}$|^[\u3400-\u9fff]$")
# the English name at the start of a gloss: capitalised words, with the small words names hold ("of", "de", ...)
LEADING = re.compile(
    r"^((?:[A-Z][\w'’.-]*)(?: (?:[A-Z][\w'’.-]*|of|de|da|van|von|al|la|le|du|and)(?= [A-Z]|$|[,;( ]))*)"
)
SEE = re.compile(r"^see (?:also )?(\S+?)\[")
SMALL = {"of", "de", "da", "van", "von", "al", "la", "le", "du", "and"}
NOT_NAMES = ("variant of", "old variant", "abbr.", "used in", "erroneous", "Japanese variant")
HEADER = (
    "# Chinese names -> English, derived from CC-CEDICT (https://cc-cedict.org, published by MDBG; CC BY-SA 4.0, "
    "https://creativecommons.org/licenses/by-sa/4.0/); this table is shared under the same licence. "
    "Built by scripts/zh_names.py. Columns: simplified TAB English (alternatives separated by |) TAB kind"
)


def english(gloss: str) -> list[str]:
    """The English names a gloss starts with (several where it lists them: "United States; USA; US")."""
    out = []
    for part in gloss.split("; "):
        m = LEADING.match(part.strip())
        if not m:
            break
        words = m.group(1).split()
        while words and words[-1] in SMALL:
            words.pop()
        name = " ".join(words).rstrip(".,")
        if name and name not in out:
            out.append(name)
    return out


def entries(path: Path):
    for line in path.read_text(encoding="utf-8").splitlines():
        m = LINE.match(line)
        if m:
            _, simplified, pinyin, glosses = m.groups()
            yield simplified, pinyin, glosses.split("/")


def _pinyin_letters(pinyin: str) -> str:
    return re.sub(r"[^a-z]", "", pinyin.lower().replace("u:", "u"))


def _person(found: list[str], pinyin: str) -> list[str]:
    """A person's English, its last word first where the name is not its pinyin (a foreign name)."""
    full = found[0]
    if " " in full and re.sub(r"[^a-z]", "", full.lower()) != _pinyin_letters(pinyin):
        return [full.split()[-1], *found]
    return found


FICTION = re.compile(r"\b(?:character|novel|mythology|legend(?:ary)?|fictional|opera)\b", re.IGNORECASE)


def _ordered(renderings: list[tuple[list[str], str]]) -> str:
    ordered = sorted(renderings, key=lambda r: bool(FICTION.search(r[1])))  # stable: CC-CEDICT's order otherwise
    return "|".join(dict.fromkeys(name for r, _ in ordered for name in r))


def build(path: Path) -> dict[str, tuple[str, str]]:
    first: dict[str, bool] = {}  # headword -> whether its first entry is a name
    names: dict[str, tuple[str, str]] = {}
    several: dict[str, list[tuple[list[str], str]]] = {}
    sees: dict[str, str] = {}
    for simplified, pinyin, glosses in entries(path):
        if not HAN.match(simplified):
            continue
        gloss = glosses[0].strip()
        proper = pinyin[:1].isupper()
        name_entry = proper or gloss.startswith("surname ")
        if simplified not in first:
            first[simplified] = name_entry
        if not first[simplified] or not name_entry or gloss.startswith(NOT_NAMES):
            continue
        if simplified in names:
            found = english(gloss)
            if found and names[simplified][1] != "surname":
                several.setdefault(simplified, []).append((found, gloss))
            continue
        if gloss.startswith("surname "):
            names[simplified] = (gloss.split()[1].rstrip(",;"), "surname")
            continue
        see = SEE.match(gloss)
        if see:
            sees[simplified] = see.group(1).split("|")[-1]
            continue
        found = english(gloss)
        if found and len(simplified) >= 2:
            kind = "person" if re.search(r"\((?:c\. )?\d{3,4}\s*[-–]", gloss) else "name"
            found = _person(found, pinyin) if kind == "person" else found
            names[simplified] = ("|".join(found), kind)
            several[simplified] = [(found, gloss)]
    for simplified, renderings in several.items():
        if len(renderings) > 1:
            names[simplified] = (_ordered(renderings), names[simplified][1])
    for simplified, other in sees.items():
        if simplified not in names and other in names and names[other][1] != "surname":
            names[simplified] = names[other]
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cedict", type=Path)
    parser.add_argument("-o", "--output", type=Path, default=Path("service/serving/zh_names.tsv"))
    args = parser.parse_args(argv)
    names = build(args.cedict)
    lines = [HEADER] + [f"{k}\t{v}\t{kind}" for k, (v, kind) in sorted(names.items())]
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(names)} names -> {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
