"""Command line: ``python -m model.cli train | evaluate | translate``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from core.search import DEFAULT_LENGTH_PENALTY
from model.checkpoint import load_release, tokenizer_path
from model.config import RunConfig
from model.data import read_lines, read_parallel, split_language
from model.directions import tagged, wrong_language
from model.evaluate import evaluate, score_line, translate, translate_direction, write_hypotheses
from model.malloc_tuning import tuned_environment
from model.tokenizer import Tokenizer


def cmd_train(args: argparse.Namespace) -> int:
    from model.malloc_tuning import RestartForMemory, allocator
    from model.stop_signals import TrainingStopped
    from model.train import Trainer

    run = RunConfig.load(args.config)
    if args.epochs is not None:
        run.train.epochs = args.epochs
    if args.max_steps is not None:
        run.train.max_steps = args.max_steps
    if args.val_limit is not None:
        run.train.bleu_max_sentences = args.val_limit
    if args.accumulate is not None:
        run.train.accumulate = args.accumulate
    if args.shards is not None:
        run.train.shards = args.shards
    trainer = Trainer.from_run(run, args.data, args.out, progress=not args.no_progress, new_data=args.new_data)
    if trainer.rank == 0:
        precision = str(trainer.autocast_dtype).removeprefix("torch.") if trainer.autocast_dtype else "float32"
        print(
            f"model: {trainer.model.num_parameters():,} parameters; {trainer.source.pairs:,} training pairs "
            f"({trainer.source.identity}); {trainer.total_steps():,} steps; resuming at step {trainer.step}; "
            f"{trainer.world} process(es) on {trainer.device}, {precision}, "
            f"{trainer.cfg.accumulate} batch(es) per update; malloc: {allocator()}",
            file=sys.stderr,
        )
    try:
        trainer.train()
    except TrainingStopped as stopped:
        print(f"{stopped}; the same command resumes from it", file=sys.stderr)
        return stopped.exit_code
    except RestartForMemory as restart:  # a one-process run under the malloc tunables: the same command again
        print(restart, file=sys.stderr, flush=True)
        sys.stdout.flush()  # execv drops what a redirected stdout still buffers (the validation records)
        os.execv(sys.executable, [sys.executable, "-m", "model.cli", *args.argv])
    summary = trainer.finalize()
    if trainer.rank == 0:
        print(json.dumps(summary, indent=2))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads) if args.threads else None
    model, meta = load_release(args.model)
    tokenizer = Tokenizer(tokenizer_path(args.model))
    run = meta.get("run", {})
    if args.direction:  # a multilingual model: the split's files are named by language
        src_lang, tgt_lang = args.direction.split("-")
    else:
        tgt_lang = run.get("target_lang", "en")
        src_lang = split_language(args.data, args.split, args.source_lang or run.get("source_lang", "de"), tgt_lang)
    sources, references = read_parallel(args.data, args.split, src_lang, tgt_lang)
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    results = {}
    for beam in args.beam:
        result, hyps = evaluate(
            model, tokenizer, sources, references, beam, args.length_penalty, True, args.direction, args.pivot
        )
        results[f"beam{beam}"] = result
        print(score_line(f"{args.split} beam={beam}", result), file=sys.stderr)
        if args.hypotheses:
            write_hypotheses(f"{args.hypotheses}.beam{beam}", hyps)
    out = {"split": args.split, "data": str(args.data), "results": results}
    text = json.dumps(out, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text)
    return 0


def cmd_off_target(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads) if args.threads else None
    model, _ = load_release(args.model)
    source, target = args.direction.split("-")
    texts = read_lines(Path(args.data) / f"{args.split}.{source}")
    texts = texts[: args.limit] if args.limit else texts
    hyps, legs = translate_direction(
        model, Tokenizer(tokenizer_path(args.model)), texts, args.beam, args.length_penalty, args.direction, args.pivot
    )
    wrong = wrong_language(hyps, target)
    out = {
        "split": args.split,
        "direction": args.direction,
        "legs": legs,
        "beam_size": args.beam,
        "n_sentences": len(hyps),
        "off_target": sum(wrong),
        "share": round(sum(wrong) / max(len(hyps), 1), 4),
        "examples": [[s, h] for s, h, w in zip(texts, hyps, wrong, strict=True) if w][:10],
    }
    text = json.dumps(out, indent=2, ensure_ascii=False)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    model, _ = load_release(args.model)
    tokenizer = Tokenizer(tokenizer_path(args.model))
    texts = args.text or [line.rstrip("\n") for line in sys.stdin]
    if args.direction:
        texts = [tagged(t, args.direction) for t in texts]
    for line in translate(model, tokenizer, texts, args.beam, args.length_penalty):
        print(line)
    return 0


def cmd_backtranslate(args: argparse.Namespace) -> int:
    from model.backtranslate import backtranslate, model_translator

    torch.set_num_threads(args.threads) if args.threads else None
    model, _ = load_release(args.model)
    texts = read_lines(args.input)
    texts = texts[: args.limit] if args.limit else texts
    translator = model_translator(model, Tokenizer(tokenizer_path(args.model)), args.direction, args.beam)
    counts = backtranslate(translator, texts, args.direction, args.out)
    print(json.dumps(counts))
    return 0


def cmd_split(args: argparse.Namespace) -> int:
    from model.corpus_split import read_tatoeba, split_pairs, write_splits

    counts = write_splits(split_pairs(read_tatoeba(args.input), args.held_out), args.out, args.lang)
    print(json.dumps(counts))
    return 0


def cmd_mix(args: argparse.Namespace) -> int:
    from model.corpus_mix import Corpus, mix

    manifest = mix([Corpus.parse(c) for c in args.corpus], args.out, args.source, args.target)
    print(json.dumps(manifest["counts"]))
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from model.prepare import Recipe, prepare, table

    manifest = prepare(Recipe.load(args.recipe), args.data, args.out)
    print(table(manifest))
    print(f"wrote {args.out}/prepare.json", file=sys.stderr)
    return 0


def cmd_extend_vocab(args: argparse.Namespace) -> int:
    from model.vocab_extension import extend_release

    report = extend_release(args.model, args.data, args.out, args.symbols, args.min_count, args.max_characters)
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


def cmd_shard(args: argparse.Namespace) -> int:
    from model.shards import ShardReader, write_shards

    if args.verify:
        bad = ShardReader(args.out).verify()
        print(json.dumps({"folder": args.out, "bad_files": bad}))
        return 1 if bad else 0
    missing = [name for name in ("config", "data", "tokenizer") if getattr(args, name) is None]
    if missing:
        raise SystemExit(f"shard: --{', --'.join(missing)} required (or --verify)")
    run = RunConfig.load(args.config)
    data = Path(args.data)
    manifest = write_shards(
        Tokenizer(args.tokenizer),
        data / f"{run.train_prefix}.{run.source_lang}",
        data / f"{run.train_prefix}.{run.target_lang}",
        args.out,
        run.train.max_length,
        args.shard_pairs,
        run.train.seed,
    )
    print(json.dumps({k: manifest[k] for k in ("read", "pairs", "dropped")} | {"shards": len(manifest["shards"])}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model.cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train (or resume) a model; under torchrun it runs DDP")
    p.add_argument("--config", required=True, help="run config JSON, e.g. configs/multi30k_de_en.json")
    p.add_argument("--data", required=True, help="corpus folder with <prefix>.<lang> files")
    p.add_argument("--out", required=True, help="run folder (checkpoints, log, curve, release/)")
    p.add_argument("--epochs", type=int, help="override the config's epochs")
    p.add_argument("--max-steps", type=int, help="override the config's max_steps")
    p.add_argument("--val-limit", type=int, help="validation BLEU on the first N sentences only (a smoke run: 1-10)")
    p.add_argument("--accumulate", type=int, help="override the config's accumulate (batches per update)")
    p.add_argument("--shards", help="stream the training pairs from this `shard` folder, not --data's train split")
    p.add_argument(
        "--new-data",
        action="store_true",
        help="--data's training pairs changed since the run's last checkpoint (e.g. back-translations added): "
        "resuming mid-epoch, the next epoch starts on them (same tokenizer, validation split and schedule)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="sacreBLEU of a released model on a split")
    p.add_argument("--model", required=True, help="model folder (model.safetensors, config.json, tokenizer.model)")
    p.add_argument("--data", required=True)
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--beam", type=int, nargs="+", default=[1, 4])
    p.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY)
    p.add_argument("--output", help="write the JSON here too")
    p.add_argument("--hypotheses", help="write translations to <this>.beamN")
    p.add_argument("--limit", type=int, default=0, help="only the first N sentences of the split (0 = all)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument(
        "--source-lang", help="suffix of the split's source file (default: the model's, or the split's only one)"
    )
    p.add_argument("--direction", help="a multilingual model's direction, e.g. de-zh: sources tagged <2zh>, files "
                   "<split>.de / <split>.zh, BLEU with the target's tokenizer")  # fmt: skip
    p.add_argument("--pivot", help="translate through this language (e.g. en), two legs, as a pivoting service does")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "off-target", help="how many translations of a split's sources come out in another language than the target"
    )
    p.add_argument("--model", required=True, help="a multilingual release (or a run's best/ folder)")
    p.add_argument("--data", required=True)
    p.add_argument("--split", required=True, help="its <split>.<source> file is read; no reference is needed")
    p.add_argument("--direction", required=True, help="e.g. de-zh")
    p.add_argument("--pivot", help="translate through this language (e.g. en), two legs, as a pivoting service does")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY)
    p.add_argument("--limit", type=int, default=0, help="only the first N sentences of the split (0 = all)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--output", help="write the JSON here too")
    p.set_defaults(func=cmd_off_target)

    p = sub.add_parser("translate", help="translate text arguments or stdin lines")
    p.add_argument("--model", required=True)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=DEFAULT_LENGTH_PENALTY)
    p.add_argument("--direction", help="a multilingual model's direction, e.g. en-de (the source gets its tag)")
    p.add_argument("text", nargs="*")
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("backtranslate", help="synthetic sources for monolingual target text (tagged back-translation)")
    p.add_argument("--model", required=True, help="a multilingual release (or a run's best/ folder)")
    p.add_argument("--input", required=True, help="monolingual text, one sentence a line (e.g. news-en-mono/news.en)")
    p.add_argument("--direction", required=True, help="the reverse direction to translate in, e.g. en-de")
    p.add_argument("--out", required=True, help="folder for bt.<lang> files (appended to: a rerun continues)")
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--limit", type=int, default=0, help="only the first N lines (0 = all)")
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(func=cmd_backtranslate)

    p = sub.add_parser("split", help="deterministic train/val/test split of a Tatoeba pair file (hash of English)")
    p.add_argument("--input", required=True, help="Tatoeba file: English TAB other language [TAB attribution]")
    p.add_argument("--lang", required=True, help="code of the other language, e.g. zh or de")
    p.add_argument("--out", required=True, help="folder for train/val/test.<lang> and .en")
    p.add_argument("--held-out", type=int, default=1000, help="about this many pairs each in val and test")
    p.set_defaults(func=cmd_split)

    p = sub.add_parser("mix", help="one training folder from several corpora (oversampling by weight)")
    p.add_argument("--corpus", action="append", required=True, help="name=folder[:weight], repeatable")
    p.add_argument("--source", required=True, help="source language code, e.g. de")
    p.add_argument("--target", required=True, help="target language code, e.g. en")
    p.add_argument("--out", required=True, help="folder for train/val (mixed) and <corpus>.<split> files")
    p.set_defaults(func=cmd_mix)

    p = sub.add_parser(
        "prepare", help="normalise, filter, de-duplicate, split and mix corpora by a recipe (model/prepare.py)"
    )
    p.add_argument("--recipe", required=True, help="recipe JSON, e.g. configs/data/general.json")
    p.add_argument("--data", required=True, help="folder the recipe's corpus paths are relative to")
    p.add_argument("--out", required=True, help="training folder to write (train/val, <corpus>.<split> files)")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser(
        "extend-vocab", help="a released model with more pieces (tags, byte-spelt characters) for a warm-started run"
    )
    p.add_argument("--model", required=True, help="released model folder (model.safetensors, config.json, tokenizer)")
    p.add_argument("--data", required=True, help="the new run's corpus folder (train/val .src/.tgt)")
    p.add_argument("--out", required=True, help="folder for the extended model, tokenizer and report.json")
    p.add_argument("--symbols", nargs="*", default=[], help="user symbols to add, e.g. <2en> <2de> <2zh> <bt>")
    p.add_argument("--min-count", type=int, default=20, help="add a byte-spelt character seen this often or more")
    p.add_argument("--max-characters", type=int, default=4000, help="add at most this many characters")
    p.set_defaults(func=cmd_extend_vocab)

    p = sub.add_parser("shard", help="tokenize a training split into memory-mapped, length-sorted shards a run streams")
    p.add_argument("--config", help="run config: its train split, languages, max_length and seed")
    p.add_argument("--data", help="corpus folder with the config's <train_prefix>.<lang> files")
    p.add_argument("--tokenizer", help="the run's tokenizer.model (copied into --out; a run on the shards uses it)")
    p.add_argument("--out", required=True, help="new folder for the shards and manifest.json")
    p.add_argument("--shard-pairs", type=int, default=100_000, help="lines per shard (the writer's memory)")
    p.add_argument("--verify", action="store_true", help="only check --out's files against the manifest's sha256")
    p.set_defaults(func=cmd_shard)

    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a restart runs again (cmd_train)
    return args.func(args)


if __name__ == "__main__":
    if sys.argv[1:2] == ["train"] and (env := tuned_environment(os.environ)) is not None:
        os.execve(sys.executable, [sys.executable, "-m", "model.cli", *sys.argv[1:]], env)  # model/malloc_tuning.py
    raise SystemExit(main())
