"""BLEU of a test set through a running server with span protection on and off, side by side
(docs/real-world-text.md: protection must not cost more than 0.3 BLEU on general-domain text), and how many of the
source's names survive: a capitalised word of the source (not its first) that the reference has as written, found
as written in the translation.

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


def translate_all(client: httpx.Client, sources: list[str], language: str, protect: bool, batch: int) -> list[str]:
    out = []
    for k in range(0, len(sources), batch):
        body = {"texts": sources[k : k + batch], "source_language": language, "target_language": "en",
                "protect_spans": protect}  # fmt: skip
        answer = client.post("/v1/translate", json=body).raise_for_status().json()
        out.extend(t["text"] for t in answer["translations"])
    return out


# a capitalised word (letters, an inner hyphen or apostrophe), not after sentence-ending punctuation
CANDIDATE = re.compile(r"(?<![\w.!?])(?<![.!?] )([A-ZÄÖÜ][a-zäöüß]{2,}(?:[-'][A-ZÄÖÜ]?[a-zäöüß]+)*)(?![\w])")


def _names(source: str, reference: str) -> list[str]:
    """Capitalised words of ``source`` (not its first) that ``reference`` has as written, not at a sentence start."""
    out = []
    for m in CANDIDATE.finditer(source):
        word = m.group(1)
        if m.start() > 0 and re.search(rf"(?<!^)(?<![.!?] )(?<!\w){re.escape(word)}(?!\w)", reference):
            out.append(word)
    return out


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
    names = [_names(s, r) for s, r in zip(sources, references, strict=True)]
    print("| protect_spans | BLEU | chrF | names kept |")
    print("|---|---:|---:|---:|")
    with httpx.Client(base_url=args.url, timeout=600) as client:
        for protect in (False, True):
            hyps = translate_all(client, sources, args.language, protect, args.batch)
            bleu = sacrebleu.corpus_bleu(hyps, [references]).score
            chrf = sacrebleu.corpus_chrf(hyps, [references]).score
            pairs = zip(names, hyps, strict=True)
            kept = sum(bool(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", h)) for ns, h in pairs for n in ns)
            total = sum(len(ns) for ns in names)
            print(f"| {'on' if protect else 'off'} | {bleu:.2f} | {chrf:.2f} | {kept}/{total} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
