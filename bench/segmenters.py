"""Sentence segmenters on German and Chinese paragraphs: sentencex (the service's) against pysbd.

    python -m bench.segmenters --data ../shared/data [--size 3]

Paragraphs are --size consecutive sentences joined (German: multi30k test_2016_flickr.de, with a space;
Chinese: tatoeba-cmn-eng's Chinese side, without one), using only sentences that end in sentence punctuation
(a caption without a final period is not a sentence boundary any segmenter could see). A paragraph counts as
right when the segmenter returns exactly its sentences; boundary precision / recall count the split points.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import sentencex

END = tuple(".!?。！？…\"'“”」")


def _paragraphs(sentences: list[str], size: int, sep: str) -> list[tuple[str, list[str]]]:
    usable = [s.strip() for s in sentences if s.strip().endswith(END)]
    return [(sep.join(usable[i : i + size]), usable[i : i + size]) for i in range(0, len(usable) - size + 1, size)]


def _boundaries(parts: list[str]) -> set[int]:
    out, at = set(), 0
    for part in parts[:-1]:
        at += len(part.replace(" ", ""))
        out.add(at)
    return out


def _score(segment, paragraphs) -> tuple[float, float, float, float]:
    started = time.perf_counter()
    exact = tp = fp = fn = 0
    for text, gold in paragraphs:
        found = [s.strip() for s in segment(text) if s.strip()]
        exact += found == gold
        got, want = _boundaries(found), _boundaries(gold)
        tp, fp, fn = tp + len(got & want), fp + len(got - want), fn + len(want - got)
    seconds = time.perf_counter() - started
    return exact / len(paragraphs), tp / max(tp + fp, 1), tp / max(tp + fn, 1), seconds / len(paragraphs) * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--size", type=int, default=3)
    parser.add_argument("--zh-lines", type=int, default=6000)
    args = parser.parse_args(argv)
    de = (args.data / "multi30k" / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    cmn = (args.data / "tatoeba-cmn-eng" / "cmn.txt").read_text(encoding="utf-8-sig").splitlines()
    zh = [line.split("\t")[1] for line in cmn[-args.zh_lines :]]  # the longest sentences are last
    corpora = {"de": _paragraphs(de, args.size, " "), "zh": _paragraphs(zh, args.size, "")}
    segmenters = {"sentencex": lambda lang: lambda text: sentencex.segment(lang, text)}
    try:
        import pysbd

        segmenters["pysbd"] = lambda lang: pysbd.Segmenter(language=lang, clean=False).segment
    except ImportError:
        print("(pysbd not installed: pip install pysbd to compare)")
    print("| language | paragraphs | segmenter | exact | boundary precision | boundary recall | ms per paragraph |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for lang, paragraphs in corpora.items():
        for name, make in segmenters.items():
            exact, precision, recall, ms = _score(make(lang), paragraphs)
            row = f"| {lang} | {len(paragraphs)} | {name} | {100 * exact:.1f}% | {100 * precision:.1f}% |"
            print(f"{row} {100 * recall:.1f}% | {ms:.2f} |")


if __name__ == "__main__":
    main()
