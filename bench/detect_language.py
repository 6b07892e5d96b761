"""Accuracy and speed of the offline language detector (core/language.py, lingua) on the project's corpora.

    python -m bench.detect_language --data ../shared/data [--languages de en zh] [--zh-sample 2000]

Lines: German and English of multi30k/test_2016_flickr.{de,en} (1000 each), Chinese and English of
tatoeba-cmn-eng/cmn.txt (English TAB Chinese TAB attribution; every k-th pair, --zh-sample pairs), and short
inputs cut from the same lines (the first word; the first 2-3 words). Each input is detected among --languages;
the table gives accuracy per language and length, and microseconds per detection.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from core import language


def _lines(data: Path, zh_sample: int) -> dict[str, list[str]]:
    de = (data / "multi30k" / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    en = (data / "multi30k" / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    pairs = [line.split("\t") for line in (data / "tatoeba-cmn-eng" / "cmn.txt").read_text("utf-8-sig").splitlines()]
    step = max(1, len(pairs) // zh_sample)
    picked = pairs[::step][:zh_sample]
    return {
        "de (multi30k)": [(t, "de") for t in de if t.strip()],
        "en (multi30k)": [(t, "en") for t in en if t.strip()],
        "zh (tatoeba)": [(p[1], "zh") for p in picked],
        "en (tatoeba)": [(p[0], "en") for p in picked],
    }


def _short(items: list[tuple[str, str]], words: int) -> list[tuple[str, str]]:
    out = []
    for text, code in items:
        if code == "zh":
            out.append((text[: 2 * words], code))  # Chinese has no spaces: 2 characters a "word"
        else:
            out.append((" ".join(text.split()[:words]), code))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--languages", nargs="+", default=list(language.DEFAULT_LANGUAGES))
    parser.add_argument("--zh-sample", type=int, default=2000)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    language.detector(args.languages)
    print(f"detector among {args.languages}: built in {time.perf_counter() - started:.2f} s (models preloaded)")
    print("| input | lines | accuracy, whole line | first word | first 3 words | us per line |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, items in _lines(args.data, args.zh_sample).items():
        cells, micros = [], 0.0
        for variant in (items, _short(items, 1), _short(items, 3)):
            started = time.perf_counter()
            right = sum(language.detect(text, args.languages)[0] == code for text, code in variant)
            if variant is items:
                micros = (time.perf_counter() - started) / len(items) * 1e6
            cells.append(f"{100 * right / len(variant):.1f}%")
        print(f"| {name} | {len(items)} | {' | '.join(cells)} | {micros:.0f} |")


if __name__ == "__main__":
    main()
