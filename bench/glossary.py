"""Terminology benchmark: term use, BLEU / chrF, do-not-translate exactness and cost, with and without a glossary.

The test set is built from the corpus itself, no hand-picked terms:
1. a dictionary-like alignment: Dice coefficient of (German word, English word) co-occurrence over the training
   pairs (German words of 4+ letters that start with a capital, i.e. nouns; English words of 3+ letters, not
   stop words); a German word's candidate translations are its English words with Dice >= --min-dice and at
   least --min-count co-occurrences;
2. a sentence of the evaluation split qualifies when its source has such a noun (any form the glossary matcher
   accepts: service/serving/terms.py) whose candidate appears in the reference but NOT in the model's own greedy
   translation: the glossary entry is (noun as in the dictionary -> the candidate the reference uses). So the rate
   without the glossary is 0% by construction; the question is whether the glossary brings it to the reference's
   term, and at what BLEU and speed;
3. do-not-translate: product-name spans (a fixed list, Latin letters, digits, hyphens, umlauts) inserted before
   the final punctuation of other evaluation sentences; exactness = the span appears verbatim in the output.

Every translation goes through the engine (engine/constrained_greedy.py for greedy, constrained.py for
beam 4 in the glossary runs) and the serving layer's matching and checks (Terms.find, constraints, settle), as
the server does. Timings are CPU seconds of this process (time.process_time: less disturbed than wall time when
other processes share the cores; the engine runs onnxruntime with one thread, so CPU time is its work) per
sentence, best of --repeats: compare the ratios of one run only.

    python -m bench.glossary --model model_repository/de-en/2 --corpus ../shared/data/multi30k --sentences 60
"""

from __future__ import annotations

import argparse
import collections
import math
import platform
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import sacrebleu

import engine.engine as engine_module
from core.bundle import load_bundle
from engine.decoding import TranslateOptions
from engine.engine import Engine
from service.serving.terms import Terms, constraints, settle

STOP = frozenset(
    [
        "the",
        "and",
        "with",
        "for",
        "are",
        "that",
        "this",
        "his",
        "her",
        "its",
        "their",
        "from",
        "into",
        "onto",
        "over",
        "under",
        "who",
        "what",
        "while",
    ]
)
PRODUCTS = ["ThinkPad X1", "Zeiss Otus-55", "AirPods Pro", "Müller-Brot GmbH", "Vario-3000", "Leica M11", "GoPro HERO9"]
WORD = re.compile(r"\w+")


def read(path: Path, n: int | None = None) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[:n] if n else lines


def dictionary(de: list[str], en: list[str], min_count: int, min_dice: float) -> dict[str, list[str]]:
    """German noun -> English candidates, best Dice first."""
    f_de, f_en, both = collections.Counter(), collections.Counter(), collections.Counter()
    for s, t in zip(de, en, strict=True):
        nouns = {w for w in WORD.findall(s)[1:] if len(w) >= 4 and w[0].isupper()}
        words = {w.lower() for w in WORD.findall(t) if len(w) >= 3 and w.lower() not in STOP}
        f_de.update(nouns)
        f_en.update(words)
        both.update((a, b) for a in nouns for b in words)
    out: dict[str, list[tuple[float, str]]] = {}
    for (a, b), n in both.items():
        dice = 2 * n / (f_de[a] + f_en[b])
        if n >= min_count and dice >= min_dice:
            out.setdefault(a, []).append((dice, b))
    return {a: [b for _, b in sorted(c, reverse=True)[:3]] for a, c in out.items()}


def has_word(text: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}", text, re.IGNORECASE) is not None


def translate(engine: Engine, texts: list[str], options: TranslateOptions, terms: list[Terms] | None):
    """Texts translated (with their terms when given), settled as the server settles them; (outputs, CPU seconds)."""
    sources = engine.source_ids(texts)
    uses = [t.find(s, "de") for t, s in zip(terms, texts, strict=True)] if terms else None
    cons = [constraints(u, engine.tokenizer.encode) for u in uses] if uses else None
    started = time.process_time()
    out = engine.translate_ids(sources, options, constraints=cons)
    seconds = time.process_time() - started
    if uses:
        render = lambda s: engine.tokenizer.decode(engine.tokenizer.encode(s))  # noqa: E731
        out = [settle(t, u, render) for t, u in zip(out, uses, strict=True)]
    return out, seconds


def batched(engine, texts, options, terms, batch):
    outs, total = [], 0.0
    for i in range(0, len(texts), batch):
        o, s = translate(engine, texts[i : i + batch], options, terms[i : i + batch] if terms else None)
        outs += o
        total += s
    return outs, total


def revision_search(rev: str):
    """The constrained search of git revision ``rev`` (its engine/constrained.py), run by this engine. A
    revision whose search reads the full log-probabilities only (before TopCandidates.full) gets them: its decoder
    state is switched to the graph's log_probs output, as that revision's engine did."""
    text = subprocess.run(
        ["git", "show", f"{rev}:engine/constrained.py"], check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType(f"constrained_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(text, f"{rev}:engine/constrained.py", "exec"), module.__dict__)
    search = module.constrained_beam_search
    if "out.full" in text:  # it reads TopCandidates.full: this engine's step as it is
        return search

    def full_only(step, *args):
        state = step.__self__  # engine.decoder_state.DecoderState
        state.fetch_top, state._top_k_input, state._fetch = False, np.array([0], dtype=np.int64), None
        return search(step, *args)

    return full_only


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="model_repository/de-en/2")
    ap.add_argument("--corpus", default="../shared/data/multi30k")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--sentences", type=int, default=60, help="glossary sentences (and as many DNT sentences)")
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--min-dice", type=float, default=0.3)
    ap.add_argument("--timing-sentences", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--compare",
        metavar="REV",
        help="also time the constrained search of git revision REV (its engine/constrained.py, which then "
        "serves greedy requests too, as before constrained_greedy.py) in this run",
    )
    args = ap.parse_args()

    corpus = Path(args.corpus)
    engine = Engine(load_bundle(args.model), providers="cpu")
    lexicon = dictionary(read(corpus / "train.de"), read(corpus / "train.en"), args.min_count, args.min_dice)
    de, en = read(corpus / f"{args.split}.de"), read(corpus / f"{args.split}.en")
    greedy = TranslateOptions(beam_size=1)
    unaided, _ = batched(engine, de, greedy, None, 32)
    picked, terms = [], []
    for i, (s, r, t) in enumerate(zip(de, en, unaided, strict=True)):
        for noun, candidates in lexicon.items():
            if not Terms({noun: "x"}).find(s, "de"):
                continue
            wanted = next((c for c in candidates if has_word(r, c) and not has_word(t.text, c)), None)
            if wanted:
                picked.append(i)
                terms.append(Terms({noun: wanted}))
                break
        if len(picked) >= args.sentences:
            break
    src, ref = [de[i] for i in picked], [en[i] for i in picked]
    print(f"# terminology benchmark: {args.model}, {args.split}, {len(src)} glossary sentences of {len(de)}")
    print(f"# dictionary: {len(lexicon)} German nouns (Dice >= {args.min_dice}, count >= {args.min_count})")
    print(f"# machine: {platform.processor() or platform.machine()}; timings noisy when the cores are shared\n")
    print("| search | glossary | term use | BLEU | chrF |")
    print("| --- | --- | --- | --- | --- |")
    for name, options in (("greedy", greedy), ("beam 4", TranslateOptions(beam_size=4))):
        for label, given in (("without", None), ("with", terms)):
            outs, _ = batched(engine, src, options, given, 32)
            hyp = [o.text for o in outs]
            used = sum(has_word(h, next(iter(t.glossary.values()))) for h, t in zip(hyp, terms, strict=True))
            bleu = sacrebleu.corpus_bleu(hyp, [ref]).score
            chrf = sacrebleu.corpus_chrf(hyp, [ref]).score
            print(f"| {name} | {label} | {used / max(len(hyp), 1):.1%} | {bleu:.2f} | {chrf:.2f} |")

    rest = [i for i in range(len(de)) if i not in set(picked)][: args.sentences]
    dnt_src, spans = [], []
    for j, i in enumerate(rest):
        span = PRODUCTS[j % len(PRODUCTS)]
        s = de[i].rstrip()
        body, end = (s[:-1], s[-1]) if s[-1:] in ".!?" else (s, "")
        dnt_src.append(f"{body} mit {span}{end}")
        spans.append(span)
    print("\n| search | do-not-translate spans copied exactly |\n| --- | --- |")
    for name, options in (("greedy", greedy), ("beam 4", TranslateOptions(beam_size=4))):
        outs, _ = batched(engine, dnt_src, options, [Terms(do_not_translate=[s]) for s in spans], 32)
        exact = sum(s in o.text for s, o in zip(spans, outs, strict=True))
        print(f"| {name} | {exact}/{len(spans)} ({exact / max(len(spans), 1):.1%}) |")

    n = min(args.timing_sentences, len(src))
    searches = {"with": engine_module.constrained_beam_search}
    if args.compare:
        searches = {f"with ({args.compare})": revision_search(args.compare), **searches}
    head = "| search | batch | CPU ms/sentence without | " + " | ".join(f"CPU ms/sentence {s}" for s in searches)
    ratios = " | ".join(f"ratio {s}" for s in searches)
    print(f"\n{head} | {ratios} |  ({n} sentences, best of {args.repeats})")
    print("| --- " * (3 + 2 * len(searches)) + "|")
    for name, options in (("greedy", greedy), ("beam 4", TranslateOptions(beam_size=4))):
        for batch in (1, 32):
            times = {label: math.inf for label in ("without", *searches)}
            for _ in range(args.repeats):  # interleaved, so that a busy spell of the machine hits every column
                times["without"] = min(times["without"], batched(engine, src[:n], options, None, batch)[1])
                for label, search in searches.items():
                    engine_module.constrained_beam_search = search
                    engine.greedy_terms = "row" if label == "with" else "beam"  # a revision's own search throughout
                    times[label] = min(times[label], batched(engine, src[:n], options, terms[:n], batch)[1])
            engine_module.constrained_beam_search = searches["with"]
            engine.greedy_terms = "row"
            ms = [1000 * times[label] / n for label in times]
            cells = " | ".join(f"{m:.1f}" for m in ms) + " | " + " | ".join(f"{m / ms[0]:.2f}x" for m in ms[1:])
            print(f"| {name} | {batch} | {cells} |")


if __name__ == "__main__":
    main()
