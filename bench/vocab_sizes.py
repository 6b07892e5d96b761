"""How a joint SentencePiece vocabulary of each size cuts each language: the models issue's tokenizer question.

    python -m bench.vocab_sizes --data runs/data/multi --sizes 16000 24000 32000 [--sample 400000]

Trains one BPE tokenizer per size (and per byte-fallback setting) on a sample of the prepared training text (tags
stripped, both sides, as model/train.py's prepare_tokenizer does), then cuts the validation sentences of each
language and prints, side by side: pieces per Chinese character, per German and per English word, the share of
byte pieces (where an invalid character can come from: a byte sequence the model ends badly) and of unknown pieces,
and the share of Chinese characters in the validation text that have a piece of their own.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from core.tokenizer import Tokenizer
from model.data import read_lines
from model.directions import TAGS, split_tag
from model.tokenizer import train_tokenizer


def _is_han(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf"


def _validation_by_language(data: Path) -> dict[str, list[str]]:
    """Validation sentences by language: the tagged val files' sources (their tag names the target, so the source
    language is read from the target side's script) and targets."""
    by_lang: dict[str, list[str]] = {"de": [], "en": [], "zh": []}
    for src, tgt in zip(read_lines(data / "val.src"), read_lines(data / "val.tgt"), strict=True):
        target, text = split_tag(src)
        by_lang[target or "en"].append(tgt)
        if target == "en":
            by_lang["zh" if any(_is_han(c) for c in text) else "de"].append(text)
        else:
            by_lang["en"].append(text)
    return {lang: sorted(set(texts)) for lang, texts in by_lang.items()}


def measure(tokenizer: Tokenizer, texts: list[str], language: str) -> dict[str, float]:
    ids = [tokenizer.sp.encode(t) for t in texts]
    n = sum(len(p) for p in ids)
    bytes_ = sum(1 for p in ids for i in p if tokenizer.sp.is_byte(i))
    unknown = sum(1 for p in ids for i in p if i == tokenizer.sp.unk_id())
    units = sum(sum(_is_han(c) for c in t) for t in texts) if language == "zh" else sum(len(t.split()) for t in texts)
    return {"per_unit": n / max(units, 1), "bytes": bytes_ / max(n, 1), "unk": unknown / max(n, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a prepared multi-direction folder")
    parser.add_argument("--sizes", type=int, nargs="+", default=[16000, 24000, 32000])
    parser.add_argument("--sample", type=int, default=400_000, help="training lines per side to learn from")
    parser.add_argument("--coverage", type=float, nargs="+", default=[0.9995], help="character coverages to try")
    parser.add_argument("--no-byte-fallback", action="store_true", help="also measure each size without byte pieces")
    args = parser.parse_args(argv)
    src, tgt = read_lines(args.data / "train.src"), read_lines(args.data / "train.tgt")
    picked = random.Random(1).sample(range(len(src)), min(args.sample, len(src)))
    texts = [split_tag(src[i])[1] for i in picked] + [tgt[i] for i in picked]
    valid = _validation_by_language(args.data)
    han = {c for t in valid["zh"] for c in t if _is_han(c)}
    settings = [(size, True, c) for c in args.coverage for size in args.sizes]
    settings += [(size, False, c) for c in args.coverage for size in args.sizes] if args.no_byte_fallback else []
    sizes = ", ".join(f"{k} {len(v):,}" for k, v in valid.items())
    print(f"training text: {len(texts):,} lines; validation sentences: {sizes}")
    print("| vocabulary | coverage | byte fallback | zh pieces/char | de pieces/word | en pieces/word |"
          " byte pieces zh / de |"
          " unknown zh | Han chars with a piece |")  # fmt: skip
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for size, fallback, coverage in settings:
            path = Path(tmp) / f"v{size}-{fallback}-{coverage}.model"
            train_tokenizer(texts, path, size, "bpe", coverage, user_symbols=list(TAGS.values()),
                            byte_fallback=fallback)  # fmt: skip
            tok = Tokenizer(path)
            m = {lang: measure(tok, valid[lang], lang) for lang in ("zh", "de", "en")}
            whole = sum(tok.sp.piece_to_id(c) != tok.sp.unk_id() for c in han) / max(len(han), 1)
            print(f"| {size:,} | {coverage} | {'yes' if fallback else 'no'} | {m['zh']['per_unit']:.3f}"
                  f" | {m['de']['per_unit']:.3f} | {m['en']['per_unit']:.3f}"
                  f" | {m['zh']['bytes']:.2%} / {m['de']['bytes']:.2%} |"
                  f" {m['zh']['unk']:.2%} | {whole:.1%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
