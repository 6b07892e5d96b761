"""What real-world-text handling costs (docs/real-world-text.md): the text pass per sentence, and the engine's time
for the sentences it constrains, with it on and off, side by side in one run.

    python -m bench.real_text --bundle model_repository/de-en/3 --source ../shared/data/wmt-news-de-en/newstest2018.de \
        [--limit 500] [--beam 4] [--repeats 3]

Rows: the text pass alone (spans, numbers, stand-ins, casing, character folding: microseconds per sentence); name
finding alone (service/serving/names.py, after a first sentence has loaded its word lists and tagger) and the share
of sentences with a name (each is searched a second time only where its translation lost one); the share of
sentences that get constraints; engine CPU seconds for those sentences translated as the service does with
protection on (stand-ins in the source, constrained search) against off (the sentences as written, free search),
median of ``--repeats``. Nothing else should run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.harness import cpu_model
from core.bundle import load_bundle
from core.normalize import fold_unknown
from engine import Engine
from engine.decoding import TranslateOptions
from model.data import read_lines
from service.serving.casing import casing_of, truecased
from service.serving.names import find_names, in_small_letters
from service.serving.spans import find_spans, has_placeholders, with_stand_ins
from service.serving.terms import constraints


def text_pass(engine: Engine, sentence: str, source: str, target: str) -> tuple[str, list]:
    """What service/serving/prepared.py does to a sentence before the engine, for one sentence."""
    encode = engine.tokenizer.encode
    casing = casing_of(sentence) if source != "zh" else None
    shown = truecased(sentence, encode) if casing else sentence
    uses = find_spans(shown, source, target)
    if uses:
        shown, uses = with_stand_ins(shown, uses, has_placeholders(engine.tokenizer))
    fold_unknown(shown, engine.tokenizer.spelled_in_bytes)
    return shown, uses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--source", type=Path, required=True, help="sentences in the bundle's source language")
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    bundle = load_bundle(args.bundle)
    source, target = bundle.manifest["source_language"], bundle.manifest.get("target_language", "en")
    engine = Engine(bundle, providers="cpu")
    sentences = [s for s in read_lines(args.source) if s.strip()][: args.limit]
    started = time.process_time()
    passed = [text_pass(engine, s, source, target) for s in sentences]
    per_sentence_us = (time.process_time() - started) / len(sentences) * 1e6
    ordinary = in_small_letters(engine.tokenizer)
    find_names(sentences[0], source, ordinary)  # loads wordfreq's lists or jieba's dictionary: once per process
    started = time.process_time()
    named = sum(bool(find_names(s, source, ordinary)) for s in sentences)
    names_us = (time.process_time() - started) / len(sentences) * 1e6
    chosen = [i for i, (_, uses) in enumerate(passed) if uses]
    options = TranslateOptions(beam_size=args.beam)
    encode = engine.tokenizer.encode
    on_texts = [passed[i][0] for i in chosen]
    on_constraints = [constraints(passed[i][1], encode) for i in chosen]
    off_texts = [sentences[i] for i in chosen]
    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.repeats):  # interleaved, so drift hits both alike
        for mode in ("off", "on"):
            started = time.process_time()
            for k in range(0, len(chosen), 16):
                if mode == "on":
                    engine.translate(on_texts[k : k + 16], options, constraints=on_constraints[k : k + 16])
                else:
                    engine.translate(off_texts[k : k + 16], options)
            times[mode].append(time.process_time() - started)
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    print(f"# {args.bundle} on {cpu_model()}; {len(sentences)} sentences of {args.source.name}, beam {args.beam}")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| text pass, us per sentence | {per_sentence_us:.0f} |")
    print(f"| name finding, us per sentence | {names_us:.0f} |")
    print(f"| sentences with a name | {named} of {len(sentences)} ({named / len(sentences):.0%}) |")
    share = len(chosen) / len(sentences)
    print(f"| sentences with a span or number | {len(chosen)} of {len(sentences)} ({share:.0%}) |")
    print(f"| engine CPU s for them, protection off | {off:.2f} |")
    print(f"| engine CPU s for them, protection on | {on:.2f} |")
    print(f"| on / off | {on / off:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
