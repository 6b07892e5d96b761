"""Back-translation (Sennrich et al. 2016; tagged: Caswell et al. 2019): monolingual target-language text translated
into the source language by the multilingual model's reverse direction, giving synthetic (source, real target) pairs.

``python -m model.cli backtranslate --model RUN/best --input news.en --direction en-de --out runs/bt/news-de``
(PyTorch), or ``python -m export.cli backtranslate --bundle B ...`` (the engine: int8, the bundle's n-gram block,
an order of magnitude faster on a CPU), writes ``<out>/bt.de`` (synthetic German) beside ``<out>/bt.en`` (the real
English), line-aligned, in chunks: an interrupted run continues where its files end. A recipe takes them with the
``parallel`` reader, ``directions`` limited to the real-target one (``de-en``) and ``source_tag: "<bt>"`` so the
model can tell synthetic sources apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from model.data import read_lines
from model.directions import tagged
from model.evaluate import is_loop, translate
from model.tokenizer import Tokenizer
from model.transformer import Transformer

CHUNK = 512  # sentences translated (and appended to the files) at a time

Translator = Callable[[list[str]], list[str]]  # a chunk of untagged source texts -> their translations


def model_translator(model: Transformer, tokenizer: Tokenizer, direction: str, beam_size: int = 1) -> Translator:
    """Translations in ``direction`` by the PyTorch model (sources tagged as in training)."""
    return lambda chunk: translate(model, tokenizer, [tagged(t, direction) for t in chunk], beam_size)


def backtranslate(
    translator: Translator,
    texts: Sequence[str],
    direction: str,
    out: str | Path,
    progress: bool = True,
) -> dict[str, int]:
    """Translate ``texts`` (in ``direction``'s source language) with ``translator`` and append (translation, text)
    lines to ``<out>/bt.<target>`` and ``<out>/bt.<source>``; texts a previous call finished (``bt.done``) are
    skipped. A translation that loops or comes out empty leaves its pair out (counted in ``dropped_this_call``)."""
    source, target = direction.split("-")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    synthetic, real = out / f"bt.{target}", out / f"bt.{source}"
    done_file = out / "bt.done"
    done = int(done_file.read_text()) if done_file.exists() else 0
    kept = len(read_lines(real)) if real.exists() else 0
    dropped = 0
    starts = range(done, len(texts), CHUNK)
    with torch.inference_mode():
        for start in tqdm(starts, desc=f"back-translate {direction}", unit="chunk", disable=not progress):
            chunk = [" ".join(t.split()) for t in texts[start : start + CHUNK]]
            hyps = translator(chunk)
            pairs = [(h, t) for h, t in zip(hyps, chunk, strict=True) if h.strip() and t and not is_loop(h)]
            dropped += len(chunk) - len(pairs)
            with synthetic.open("a", encoding="utf-8") as fs, real.open("a", encoding="utf-8") as fr:
                fs.writelines(h + "\n" for h, _ in pairs)
                fr.writelines(t + "\n" for _, t in pairs)
            kept += len(pairs)
            done_file.write_text(str(start + len(chunk)))
    return {"read": len(texts), "kept": kept, "dropped_this_call": dropped}
