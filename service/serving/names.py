"""Names in a source sentence and the form a translation must hold them in (docs/real-world-text.md, "Names").

``find_names(sentence, source)`` lists a sentence's names as ``Use``s of kind ``name`` (service/serving/terms.py):
``found`` the name as written, ``target`` its English form, ``alternatives`` other forms that count as present.
They are left to the model; a sentence whose translation lacks one is searched again with a stand-in for it, which
is put back as the name's target form (service/serving/prepared.py ``repair``), and one still missing is a
``name_missing`` warning.

- German: a capitalised word is a name when the word-frequency lists (wordfreq) say it is about as common in
  English text as in German text (a name crosses languages: Merkel, Trump, Berlin; a German noun does not: Haus,
  Regierung) and it is no very common German word (Land, Tag), or when neither list knows it and it is no
  compound of a German word (Picciuto is a name, Stammesrates the council of a tribe); and not when the model's
  vocabulary has it in small letters (a word both languages share: Statue, Basis; ``in_small_letters``).
  Neighbouring names make one (Angela Merkel); a genitive s is left off where the word without it is the more
  common (Merkels -> Merkel). The target is the name as written: the translation copies it (in small letters, or
  with spaces for its hyphens, it counts as kept too: the model translated a word).
- Chinese: the words jieba's tagger calls a person (``nr``), a place (``ns``) or an organisation (``nt``), and the
  nouns of the name table (zh_names.tsv, derived from CC-CEDICT by scripts/zh_names.py). The table's English wins
  (阿里巴巴 -> Alibaba, 特朗普 -> Trump); a person or place it lacks is written in pinyin (pypinyin): a person's
  surname, then the given name joined (王小明 -> Wang Xiaoming), a place as one word. An organisation the table
  lacks is left alone (its pinyin is no English name).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache, lru_cache
from pathlib import Path

from service.serving.terms import Use

TABLE = Path(__file__).with_name("zh_names.tsv")
# German: a capitalised word, letters only (inner hyphens: Mecklenburg-Vorpommern)
GERMAN_WORD = re.compile(r"(?<![\w-])[A-ZÄÖÜ][a-zäöüß]+(?:-[A-ZÄÖÜ][a-zäöüß]+)*(?![\w-])")
CROSSES = 1.5  # a name's English frequency (Zipf) is at most this far below its German one
COMMON = 5.0  # a German word this frequent (Zipf) is an ordinary word, whatever its English frequency
COMPOUND_TAIL = 3.0  # an unknown word ending in a German word this frequent (3+ letters) is a compound
MIN_LETTERS = 3
# wordfreq's lists: German's small one (words down to Zipf 3, 4 MB in memory) and English's large one (34 MB). A
# German word rarer than Zipf 3 reads as unknown, which is what tells names: on newstest2017's first 1,500 German
# sentences this finds the capitalised words the reference copies as well as both large lists (104 MB) do
# (precision 0.68, recall 0.86 against 0.68, 0.85)
WORDLISTS = {"de": "small", "en": "large"}


@lru_cache(maxsize=1 << 16)  # bounded: a long-running service meets ever new words
def _zipf(word: str, language: str) -> float:
    from wordfreq import zipf_frequency

    return zipf_frequency(word, language, wordlist=WORDLISTS[language])


def _compound(word: str) -> bool:
    low = word.lower()
    return any(_zipf(low[i:], "de") >= COMPOUND_TAIL for i in range(MIN_LETTERS, len(low) - 2))


def is_german_name(word: str) -> bool:
    """Whether a capitalised German word is a name (the rule in the module's docstring)."""
    if "-" in word:  # Mecklenburg-Vorpommern is a name, Corona-Krise is not: each part decides
        return all(is_german_name(part) for part in word.split("-"))
    if len(word) < MIN_LETTERS:
        return False
    de, en = _zipf(word, "de"), _zipf(word, "en")
    if de == 0 and en == 0:
        return not _compound(word)
    return en > 0 and en >= de - CROSSES and de < COMMON


def in_small_letters(*tokenizers) -> Callable[[str], bool]:
    """Whether a model's vocabulary (its tokenizers') has a word in small letters as a whole word: an ordinary word
    of its training text (Statue, Nation, Basis: "statue", "nation", "basis"), as a name is never written so."""

    def ordinary(word: str) -> bool:
        piece = "\u2581" + word.lower()
        return any(t.sp.piece_to_id(piece) != t.sp.unk_id() for t in tokenizers)

    return ordinary


def _base(word: str) -> str:
    """A genitive's name: Merkels -> Merkel where the word without its s is the more common."""
    if word.endswith("s") and len(word) > MIN_LETTERS + 1 and _zipf(word[:-1], "de") > max(_zipf(word, "de"), 0):
        return word[:-1]
    return word


def _german_use(found: str, name: str) -> Use:
    """A German name to copy; written in small letters (a word English shares: Statue -> statue) or with spaces for
    its hyphens (Twitter-Feed -> Twitter feed) it counts as present too: the model translated a word, not lost a
    name."""
    forms = (name.lower(), name.replace("-", " "), name.replace("-", " ").lower())
    return Use(
        found, found, name, copy=True, kind="name", alternatives=tuple(f for f in dict.fromkeys(forms) if f != name)
    )


def german_names(sentence: str, ordinary: Callable[[str], bool] | None = None) -> list[Use]:
    uses: list[Use] = []
    last_end = -2
    for m in GERMAN_WORD.finditer(sentence):
        name = _base(m.group())
        if not is_german_name(name) or (ordinary is not None and ordinary(name)):
            continue
        if uses and sentence[last_end : m.start()] == " " and uses[-1].found == uses[-1].target:  # Angela Merkel
            prev = uses.pop()
            found = sentence[sentence.rfind(prev.found, 0, last_end) : m.end()]
            uses.append(_german_use(found, f"{prev.target} {name}"))
        else:
            uses.append(_german_use(m.group(), name))
        last_end = m.end()
    return uses


@cache
def name_table() -> dict[str, tuple[tuple[str, ...], str]]:
    """Simplified Chinese name -> (its English forms, the first preferred; kind: person, surname or name)."""
    out = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        chinese, english, kind = line.split("\t")
        out[chinese] = (tuple(english.split("|")), kind)
    return out


# the double surnames in use (a person's name starting with one has a two-character surname)
DOUBLE_SURNAMES = frozenset(
    ["欧阳", "司马", "诸葛", "上官", "东方", "皇甫", "令狐", "公孙", "慕容", "夏侯"]
    + ["尉迟", "长孙", "宇文", "司徒", "轩辕", "端木", "独孤", "南宫", "西门", "呼延"]
)


def pinyin_name(chinese: str, person: bool) -> str:
    """A Chinese name in pinyin without tones: a person's surname (two characters where it is a double one such as
    欧阳) then the given name joined, each capitalised; anything else as one word."""
    from pypinyin import lazy_pinyin

    syllables = lazy_pinyin(chinese)
    if not person or len(chinese) < 2:
        return "".join(syllables).capitalize()
    cut = 2 if len(chinese) > 2 and chinese[:2] in DOUBLE_SURNAMES else 1
    surname, given = "".join(syllables[:cut]), "".join(syllables[cut:])
    return f"{surname.capitalize()} {given.capitalize()}"


# what an organisation's name ends with that is no part of its English name (company, group, bank, university ...)
ORGANISATIONS = ("公司", "集团", "银行", "大学", "集团公司", "有限公司", "股份有限公司")


@cache
def _tagger():
    import logging

    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)  # its "Building prefix dict" lines are no service log
    return jieba.posseg


def chinese_names(sentence: str) -> list[Use]:
    table = name_table()
    uses = []
    for pair in _tagger().cut(sentence):
        word, flag = pair.word, pair.flag
        if len(word) < 2 or not re.fullmatch(r"[\u3400-\u9fff·]+", word):
            continue
        if flag == "nt" and word not in table:  # 华为公司: the table's 华为 (Huawei), the company word translated
            word = next((word[: -len(s)] for s in ORGANISATIONS if word.endswith(s) and word[: -len(s)] in table), word)
        known = table.get(word)
        if known and known[1] != "surname" and flag.startswith("n"):
            forms = known[0]
        elif flag.startswith(("nr", "ns")):
            forms = (pinyin_name(word, flag.startswith("nr")),)
        else:
            continue
        uses.append(Use(word, word, forms[0], copy=True, kind="name", alternatives=forms[1:]))
    return uses


def find_names(sentence: str, source: str, ordinary: Callable[[str], bool] | None = None) -> list[Use]:
    """The names of ``sentence`` (in ``source``: German or Chinese; none for other languages), in order.
    ``ordinary``: whether a capitalised word is an ordinary word all the same (``in_small_letters``)."""
    if source == "de":
        return german_names(sentence, ordinary)
    if source == "zh":
        return chinese_names(sentence)
    return []


def warm(sources: set[str]) -> None:
    """Load what finding names in these source languages reads (wordfreq's lists, jieba's dictionary and the name
    table), which the first request would otherwise wait for."""
    for source, sample in (("de", "Gestern traf Picciuto Frau Merkel."), ("zh", "马云在杭州创立了阿里巴巴。")):
        if source in sources:
            find_names(sample, source)
