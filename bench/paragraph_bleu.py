"""BLEU on paragraphs with and without sentence splitting, on engine.Engine directly.

    python -m bench.paragraph_bleu --data ../shared/data/multi30k [--bundle model_repository/de-en/1] [--beam 4]

Paragraphs: 3 consecutive sentences of test_2016_flickr.de joined with a space (333 paragraphs); references:
the same English sentences joined. Rows: each paragraph translated as one input (what /v1 did before
split_sentences), the same paragraphs split by service/serving/segmentation.py (sentencex) and reassembled
(split_sentences: true), and the 1000 sentences translated one by one (the model's own sentence-level BLEU,
joined the same way) as the ceiling. sacreBLEU, cased, 13a; beam --beam, length penalty 0.6 (the /v1 defaults).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import sacrebleu

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from service.serving.segmentation import join, split_text

ROOT = Path(__file__).resolve().parent.parent


def _translate(engine: Engine, texts: list[str], options: TranslateOptions, batch: int = 32) -> list[str]:
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    done: dict[int, str] = {}
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        for i, t in zip(chunk, engine.translate([texts[i] for i in chunk], options), strict=True):
            done[i] = t.text
    return [done[i] for i in range(len(texts))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--bundle", type=Path, default=ROOT / "model_repository" / "de-en" / "1")
    parser.add_argument("--variant", default=None)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--size", type=int, default=3)
    args = parser.parse_args(argv)
    src = (args.data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    ref = (args.data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    n = len(src) // args.size * args.size
    paragraphs = [" ".join(src[i : i + args.size]) for i in range(0, n, args.size)]
    references = [" ".join(ref[i : i + args.size]) for i in range(0, n, args.size)]
    bundle = load_bundle(args.bundle)
    engine = Engine(bundle, args.variant, "cpu")
    options = TranslateOptions(beam_size=args.beam, length_penalty=0.6)
    print(f"bundle {args.bundle} ({engine.variant}), beam {args.beam}, {len(paragraphs)} paragraphs of {args.size}")
    rows = []

    started = time.perf_counter()
    whole = _translate(engine, paragraphs, options)
    rows.append(("paragraph as one input (split_sentences: false)", whole, time.perf_counter() - started))

    started = time.perf_counter()
    layouts = [split_text(p, bundle.manifest["source_language"]) for p in paragraphs]
    sentences = [s for layout in layouts for s in layout.sentences]
    translated = _translate(engine, sentences, options)
    joined, k = [], 0
    for layout in layouts:
        joined.append(join(layout, translated[k : k + len(layout.sentences)], bundle.manifest["target_language"]))
        k += len(layout.sentences)
    name = f"split by sentencex ({len(sentences)} sentences), reassembled (split_sentences: true)"
    rows.append((name, joined, time.perf_counter() - started))

    started = time.perf_counter()
    gold = _translate(engine, src[:n], options)
    gold_joined = [" ".join(gold[i : i + args.size]) for i in range(0, n, args.size)]
    rows.append(("gold sentence boundaries (each test sentence alone)", gold_joined, time.perf_counter() - started))

    print("| paragraphs translated | BLEU | chrF | seconds |")
    print("| --- | --- | --- | --- |")
    for name, hypotheses, seconds in rows:
        bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
        chrf = sacrebleu.corpus_chrf(hypotheses, [references]).score
        print(f"| {name} | {bleu:.2f} | {chrf:.2f} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
