"""Checks of real-world text through a running server (docs/real-world-text.md): how many pass, with and without
span protection, side by side.

    python -m bench.real_text_checks --url http://127.0.0.1:8000 [--sentences bench/data/real_text_checks.tsv]

Each sentence of the file (``language TAB sentence``, written for this check, from no corpus) is translated into
English twice, ``protect_spans`` on and off, and gets the checks it calls for: each URL, address, path, handle,
hashtag, version, identifier, code span and emoji of the source exactly once in the translation; each number of the
source present in English's convention (times and dates as written); an all-caps source answered in capitals; a
typographic quote not flagged ``unknown_characters``; an all-caps or Title-Case sentence's translation within chrF
70 of its ordinary-case version's (case ignored); each name the file lists for the sentence (written by hand: the
English a translator would write, Chinese names in pinyin or their usual English) in the translation, in one of
its forms; and in every translation, no U+FFFD. ``protect_spans`` and ``protect_names`` are switched together.
Prints one row per check kind and the total pass rate, and the failures.
"""

from __future__ import annotations

import argparse
import unicodedata
from collections import Counter
from pathlib import Path

import httpx
import sacrebleu

from core.numbers import NUMBER, TIME_OR_DATE, written_in
from service.serving.casing import casing_of
from service.serving.spans import find_spans

DEFAULT = Path(__file__).resolve().parent / "data" / "real_text_checks.tsv"
TYPOGRAPHIC = "„“”‚‘’«»–—…"
CASE_CHRF = 70


def checks_of(sentence: str, language: str) -> list[tuple[str, str]]:
    """(kind, what the translation must hold) for one source sentence."""
    spans = [u.target for u in find_spans(sentence, language, "en") if u.kind == "span"]
    out = [("span", span) for span in spans]
    for m in TIME_OR_DATE.finditer(sentence):
        out.append(("number", m.group()))
    claimed = "".join(m.group() for m in TIME_OR_DATE.finditer(sentence)) + " ".join(spans)
    for m in NUMBER.finditer(sentence):
        if m.group() not in claimed:
            plain = unicodedata.normalize("NFKC", m.group())
            out.append(("number", written_in(plain, language, "en") or plain))
    if casing_of(sentence) == "upper":
        out.append(("all_caps", ""))
    if any(ch in TYPOGRAPHIC for ch in sentence):
        out.append(("quotes", ""))
    out.append(("valid", ""))
    return out


def passes(kind: str, want: str, answer: dict) -> bool:
    text = answer["text"]
    if kind == "span":
        return text.count(want) == 1
    if kind == "number":
        return want in text
    if kind == "all_caps":
        letters = [c for c in text if c.isalpha()]
        return bool(letters) and all(c.isupper() for c in letters)
    if kind == "case_chrf":  # within chrF 70 of the ordinary-case sentence's translation, case ignored
        return sacrebleu.sentence_chrf(text.lower(), [want.lower()]).score >= CASE_CHRF
    if kind == "name":  # any of its forms
        return any(form in text for form in want.split("|"))
    if kind == "quotes":
        return "unknown_characters" not in [w["code"] for w in answer.get("warnings", [])]
    return "\ufffd" not in text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--sentences", type=Path, default=DEFAULT)
    args = parser.parse_args(argv)
    lines = [line.split("\t") for line in args.sentences.read_text(encoding="utf-8").splitlines()]
    rows = [(r + ["", ""])[:4] for r in lines if len(r) >= 2 and not r[0].startswith("#")]
    results: dict[bool, Counter] = {True: Counter(), False: Counter()}
    failures = []
    with httpx.Client(base_url=args.url, timeout=120) as client:

        def translate(text: str, lang: str, protect: bool) -> dict:
            body = {"texts": [text], "source_language": lang, "target_language": "en", "protect_spans": protect,
                    "protect_names": protect}  # fmt: skip
            return client.post("/v1/translate", json=body).raise_for_status().json()["translations"][0]

        for protect in (True, False):
            for lang, text, ordinary, names in rows:
                answer = translate(text, lang, protect)
                checks = checks_of(text, lang) + [("name", n) for n in names.split(",") if n]
                if ordinary:  # an all-caps or Title-Case sentence: chrF against the ordinary sentence's translation
                    checks.append(("case_chrf", translate(ordinary, lang, protect)["text"]))
                for kind, want in checks:
                    ok = passes(kind, want, answer)
                    results[protect][(kind, ok)] += 1
                    if protect and not ok:
                        failures.append(f"{kind} {want!r}: {text} -> {answer['text']}")
    kinds = sorted({k for c in results.values() for k, _ in c})
    print("| check | passed, protection on | passed, off |")
    print("|---|---:|---:|")
    for kind in [*kinds, "all"]:
        cells = []
        for protect in (True, False):
            c = results[protect]
            good = sum(n for (k, ok), n in c.items() if ok and kind in (k, "all"))
            total = sum(n for (k, _), n in c.items() if kind in (k, "all"))
            cells.append(f"{good}/{total} ({good / max(total, 1):.0%})")
        print(f"| {kind} | {cells[0]} | {cells[1]} |")
    for line in failures:
        print("failed:", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
