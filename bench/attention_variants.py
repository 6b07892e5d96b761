"""The survey's attention variants side by side: each trained with the same short budget, exported and measured.

    python -m bench.attention_variants --data path/to/multi30k --max-steps 2000 --threads 2

For each variant (vanilla, sparse, linear, xl_relative; ``VARIANTS``), from the same run config (default
configs/multi30k_de_en.json, only the attention settings changed) and the same seed: train ``--max-steps`` steps
(the run resumes from its last checkpoint when restarted), release, export an fp32 bundle, then with the engine on
onnxruntime (CPU, ``--threads`` intra-op threads, every variant on decoder.onnx so all search with the same kind of
graph): greedy BLEU on val and test (sacreBLEU, as ``export.cli evaluate``), greedy decoding speed in generated
tokens per second at batch 1 and batch 32, and the encoder self-attention of one sentence (layer 0, mean of heads)
drawn by the viewer's heatmap tool (``service.tools.heatmap.render_heatmap``). The table, the machine and the
command are written into the model card between ``<!-- attention-variants: begin -->`` and ``... end -->``.

A smoke run (a few steps, ``--val-limit``, ``--test-limit``, ``--speed-sentences``) checks the chain; its numbers
mean nothing and it should not write the model card (``--model-card ''``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import shlex
import sys
import time
from pathlib import Path

from bench.harness import cpu_model, write_section

VARIANTS: dict[str, dict] = {
    "vanilla": {},
    "sparse": {"attention": "sparse", "sparse_window": 4, "sparse_stride": 8, "sparse_global": 1},
    "linear": {"attention": "linear"},
    "xl_relative": {"positional_encoding": "xl_relative"},
}
HEATMAP_SENTENCE = "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt, steht vor einem großen Gebäude."
MARKER = "attention-variants"


def train_variant(name: str, args: argparse.Namespace, out: Path) -> dict:
    """Train (or resume) and release one variant; returns its settings, parameters and training seconds."""
    import torch

    from model.config import RunConfig
    from model.train import Trainer

    run = RunConfig.load(args.config)
    run.name = f"{run.name}-{name}"
    run.model = dataclasses.replace(run.model, **VARIANTS[name])
    run.train.max_steps = args.max_steps
    run.train.eval_every = args.eval_every or args.max_steps
    run.train.threads = args.train_threads or args.threads
    if args.val_limit:
        run.train.bleu_max_sentences = args.val_limit
    torch.set_num_threads(run.train.threads)
    trainer = Trainer.from_run(run, args.data, out / "run", progress=False)
    released = trainer.step >= run.train.max_steps and (out / "run" / "release").is_dir()  # a finished run
    trainer.train()
    if not released:
        trainer.finalize()
    return {
        "settings": dict(VARIANTS[name]) or {"attention": "vanilla"},
        "parameters": trainer.model.num_parameters(),
        "steps": trainer.step,
        "train_seconds": round(trainer.train_seconds, 1),  # wall time in train(), across resumes
        "train_threads": run.train.threads,
        "languages": (run.source_lang, run.target_lang),
    }


def export_variant(out: Path) -> Path:
    """An fp32 bundle of the released weights, through the export command line."""
    from export.cli import main as export_main

    bundle = out / "repository" / "de-en" / "1"
    release = str(out / "run" / "release")
    code = export_main(
        ["export", "--model", release, "--out", str(bundle), "--name", "de-en", "--variants", "fp32", "--force"]
    )
    if code != 0:
        raise RuntimeError(f"export of {release} failed (exit {code})")
    return bundle


def measure(bundle: Path, args: argparse.Namespace, name: str, languages: tuple[str, str], images: Path) -> dict:
    """Greedy BLEU on val and test, greedy tok/s at batch 1 and 32, and the encoder heatmap PNG."""
    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions
    from model.data import read_parallel
    from model.evaluate import bleu
    from service.tools.heatmap import render_heatmap, select, token_labels

    engine = Engine(load_bundle(bundle), "fp32", "cpu", intra_op_threads=args.threads, lean_decoder=False)
    greedy = TranslateOptions(beam_size=1)
    result: dict = {}
    test_sources: list[str] = []
    for key, split, limit in (("val_bleu", "val", args.val_limit), ("test_bleu", args.test_split, args.test_limit)):
        sources, references = read_parallel(args.data, split, *languages)
        if limit:
            sources, references = sources[:limit], references[:limit]
        hyps = []
        for start in range(0, len(sources), 32):
            hyps += [t.text for t in engine.translate(sources[start : start + 32], greedy)]
        result[key] = bleu(hyps, references)["bleu"]
        test_sources = sources
    speed_sources = engine.source_ids(test_sources[: args.speed_sentences])
    for batch in (1, 32):
        stats: dict = {}
        started = time.perf_counter()
        for start in range(0, len(speed_sources), batch):
            engine.translate_ids(speed_sources[start : start + batch], greedy, stats)
        result[f"tok_s_b{batch}"] = round(stats.get("generated_tokens", 0) / (time.perf_counter() - started), 1)
    attention = engine.attention(HEATMAP_SENTENCE)
    rows, cols = token_labels(attention, "encoder")
    png = images / f"attention-variant-{name}.png"
    title = f"{name}: encoder self-attention, layer 0, mean of heads"
    render_heatmap(select(attention["encoder"], 0, "mean"), rows, cols, png, title=title)
    result["heatmap"] = str(png)
    return result


def render(rows: dict[str, dict], args: argparse.Namespace, command: str, card: Path) -> str:
    train_threads = ", ".join(sorted({str(r.get("train_threads", args.threads)) for r in rows.values()}))
    lines = [
        f"Measured {dt.date.today().isoformat()} on {cpu_model()} (decoding threads: {args.threads}), "
        f"{args.max_steps} training steps each from `{args.config}` (same seed, same data, only the attention "
        f"settings changed; training threads per run: {train_threads}, validation every "
        f"{args.eval_every or args.max_steps} steps included in the training time); greedy BLEU (sacreBLEU, cased) "
        f"on val and {args.test_split}; decoding speed: generated "
        f"tokens per second, greedy, onnxruntime fp32 on decoder.onnx for every variant, "
        f"{args.speed_sentences} {args.test_split} sentences.",
        "",
        f"Command: `{command}`",
        "",
        "| variant | settings | parameters | training (s) | val BLEU | test BLEU | greedy tok/s b1 | "
        "greedy tok/s b32 | encoder attention |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, r in rows.items():
        settings = ", ".join(f"{k}={v}" for k, v in r["settings"].items())
        image = Path(r["heatmap"])
        try:
            link = f"[png]({image.resolve().relative_to(card.resolve().parent).as_posix()})"
        except ValueError:
            link = image.as_posix()
        lines.append(
            f"| {name} | {settings} | {r['parameters']:,} | {r['train_seconds']:.0f} | {r['val_bleu']:.2f} | "
            f"{r['test_bleu']:.2f} | {r['tok_s_b1']:.1f} | {r['tok_s_b32']:.1f} | {link} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.attention_variants",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", required=True, help="Multi30k folder: train/val/<test-split> .de and .en")
    parser.add_argument(
        "--config", default="configs/multi30k_de_en.json", help="the run config every variant starts from"
    )
    parser.add_argument("--out", default="build/attention-variants", help="work folder (runs resume from it)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--max-steps", type=int, required=True, help="the training budget of every variant")
    parser.add_argument("--eval-every", type=int, default=0, help="validation interval (default: at the end only)")
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads for BLEU and tok/s")
    parser.add_argument("--train-threads", type=int, default=0, help="torch threads for training (default: --threads)")
    parser.add_argument(
        "--train-only",
        action="store_true",
        help="train and release only (e.g. two runs of one thread each in parallel); a later run without this flag "
        "resumes the finished runs at once and measures every variant on a quiet machine",
    )
    parser.add_argument("--test-split", default="test_2016_flickr")
    parser.add_argument("--val-limit", type=int, default=0, help="first N val sentences only (smoke run)")
    parser.add_argument("--test-limit", type=int, default=0, help="first N test sentences only (smoke run)")
    parser.add_argument("--speed-sentences", type=int, default=256, help="test sentences decoded for tok/s")
    parser.add_argument("--images", default="docs/images", help="folder of the heatmap PNGs")
    parser.add_argument("--model-card", default="docs/model-card.md", help="markdown file for the table; '' = print")
    args = parser.parse_args(argv)
    command = "python -m bench.attention_variants " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    out, images = Path(args.out), Path(args.images)
    rows: dict[str, dict] = {}
    for name in args.variants:
        print(f"== {name}: training {args.max_steps} steps", file=sys.stderr)
        trained = train_variant(name, args, out / name)
        if args.train_only:
            print(json.dumps({name: trained}), file=sys.stderr)
            continue
        bundle = export_variant(out / name)
        rows[name] = {**trained, **measure(bundle, args, name, trained["languages"], images)}
        print(json.dumps({name: rows[name]}), file=sys.stderr)
    if args.train_only:
        return 0
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    card = Path(args.model_card) if args.model_card else Path("model-card.md")
    text = render(rows, args, command, card)
    print(text)
    if args.model_card:
        write_section(card, MARKER, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
