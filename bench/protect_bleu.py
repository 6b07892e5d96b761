"""BLEU of a test set through a running server with span and name protection off, spans on, and both on, side by
side (docs/real-world-text.md: protection must not cost more than 0.3 BLEU on general-domain text), and how many of
the source's names survive. German (and other Latin-script) sources: a capitalised word of the source (not its
first) that the reference has as written, found as written in the translation. Chinese sources: a name
service/serving/names.py finds whose English form (the name table's, or pinyin) the reference has, found in the
translation in any of its forms.

    python -m bench.protect_bleu --url http://127.0.0.1:8000 --source ../shared/data/wmt-news-de-en/newstest2018.de \
        --reference ../shared/data/wmt-news-de-en/newstest2018.en --language de [--limit 1000] [--batch 16]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import httpx
import sacrebleu

from model.data import read_lines

# (column, protect_spans, protect_names)
SETTINGS = (("off", False, False), ("spans", True, False), ("spans + names", True, True))


def translate_all(
    client: httpx.Client, sources: list[str], language: str, protect: tuple[bool, bool], batch: int
) -> list[str]:
    out = []
    for k in range(0, len(sources), batch):
        body = {"texts": sources[k : k + batch], "source_language": language, "target_language": "en",
                "protect_spans": protect[0], "protect_names": protect[1]}  # fmt: skip
        answer = client.post("/v1/translate", json=body).raise_for_status().json()
        out.extend(t["text"] for t in answer["translations"])
    return out


# a capitalised word (letters, an inner hyphen or apostrophe), not after sentence-ending punctuation
CANDIDATE = re.compile(r"(?<![\w.!?])(?<![.!?] )([A-ZÄÖÜ][a-zäöüß]{2,}(?:[-'][A-ZÄÖÜ]?[a-zäöüß]+)*)(?![\w])")


def _chinese_names(source: str, reference: str) -> list[tuple[str, ...]]:
    """The forms of each name of a Chinese ``source`` (names.py) of which ``reference`` has one."""
    from service.serving.names import find_names

    forms = [(u.target, *u.alternatives) for u in find_names(source, "zh")]
    return [f for f in forms if any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", reference) for n in f)]


def _names(source: str, reference: str, language: str = "de") -> list[tuple[str, ...]]:
    """Capitalised words of ``source`` (not its first) that ``reference`` has as written, not at a sentence start
    (each as a one-form tuple); for Chinese, ``_chinese_names``."""
    if language == "zh":
        return _chinese_names(source, reference)
    out = []
    for m in CANDIDATE.finditer(source):
        word = m.group(1)
        if m.start() > 0 and re.search(rf"(?<!^)(?<![.!?] )(?<!\w){re.escape(word)}(?!\w)", reference):
            out.append((word,))
    return out


def kept(names: list[list[tuple[str, ...]]], hyps: list[str]) -> int:
    """How many names are in their translation, in any of their forms."""
    pairs = zip(names, hyps, strict=True)
    return sum(any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", h) for n in f) for ns, h in pairs for f in ns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--language", required=True)
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    sources, references = read_lines(args.source)[: args.limit], read_lines(args.reference)[: args.limit]
    print(f"# {args.source.name}, first {len(sources)} sentences, {args.language}->en, {args.url}")
    names = [_names(s, r, args.language) for s, r in zip(sources, references, strict=True)]
    total = sum(len(ns) for ns in names)
    print("| protection | BLEU | chrF | names kept |")
    print("|---|---:|---:|---:|")
    with httpx.Client(base_url=args.url, timeout=1800) as client:
        for column, spans, protect_names in SETTINGS:
            hyps = translate_all(client, sources, args.language, (spans, protect_names), args.batch)
            bleu = sacrebleu.corpus_bleu(hyps, [references]).score
            chrf = sacrebleu.corpus_chrf(hyps, [references]).score
            n = kept(names, hyps)
            print(f"| {column} | {bleu:.2f} | {chrf:.2f} | {n}/{total} ({n / max(total, 1):.0%}) |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
