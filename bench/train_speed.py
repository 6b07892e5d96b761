"""Training speed of one run config: target tokens per second by thread count and autocast, side by side.

    python -m bench.train_speed --config configs/general_de_zh_en.json --data runs/data/general \
        --tokenizer runs/tok/general16000.model [--threads 1 2] [--autocast none bf16] [--steps 8] [--repeats 2] \
        [--variant activation_dropout=0.0 ...] [--loss projected logits]

Every variant runs the Trainer's own ``train_step`` (forward, label-smoothed loss, backward, clipping, Adam)
on the same real batches: the first ``--pairs`` training pairs, batched by the config's ``max_tokens`` and
drawn with a fixed seed. Each variant starts from the same initial weights, takes ``--warmup`` steps that are
not timed, then ``--steps`` timed ones; repeats are interleaved across variants and the median is reported.
Each ``--variant KEY=VALUE[,KEY=VALUE]`` adds the config with those model settings changed (values in JSON) as
more rows: settings that keep every parameter's shape (dropout rates), since all rows start from the same weights.
``--loss``: the output projection inside the loss (``projected``, what training does) or logits, then the loss
(``logits``, what it did before model/losses.py's projected_label_smoothed_nll); several make more rows.
Nothing else may run on the machine meanwhile (a training run sharing the cores makes every figure wrong).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time

import torch

from bench.harness import cpu_model
from model.config import RunConfig
from model.data import Batch, encode_pairs, make_batches, read_parallel
from model.tokenizer import Tokenizer
from model.train import Trainer, TrainingData, build_optimizer


def _batches(run: RunConfig, data: str, tokenizer: Tokenizer, pairs: int, count: int) -> list[Batch]:
    src, tgt = read_parallel(data, run.train_prefix, run.source_lang, run.target_lang)
    examples = encode_pairs(tokenizer, src[:pairs], tgt[:pairs], run.train.max_length)
    index = make_batches(examples, run.train.max_tokens, seed=run.train.seed)
    chosen = random.Random(0).sample(index, min(count, len(index)))
    return [Batch.from_examples([examples[i] for i in batch]) for batch in chosen]


def _variant(run: RunConfig, settings: str) -> RunConfig:
    """The run with the model settings ``KEY=VALUE[,KEY=VALUE]`` (JSON values) changed."""
    model = run.model.to_dict()
    for item in filter(None, settings.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in model:
            raise SystemExit(f"--variant {settings!r}: {item!r} is not KEY=VALUE of a model setting")
        model[key] = json.loads(value)
    changed = copy.deepcopy(run)
    changed.model = type(run.model).from_dict(model)
    return changed


def _trainer(run: RunConfig, tokenizer: Tokenizer, threads: int, autocast: str, loss: str, initial: dict) -> Trainer:
    from model.transformer import Transformer

    run = copy.deepcopy(run)
    run.train.threads, run.train.autocast = threads, autocast
    model = Transformer(run.model)
    model.load_state_dict(initial)
    optimizer, scheduler = build_optimizer(run, model)
    data = TrainingData([], [], [], [])
    trainer = Trainer(run, tokenizer, data, model, optimizer, scheduler, "/nonexistent", progress=False)
    trainer.projected_loss = loss == "projected"
    return trainer


def measure(trainer: Trainer, batches: list[Batch], warmup: int, steps: int) -> tuple[float, float]:
    """(target tokens per wall second, per CPU second) over ``steps`` steps after ``warmup`` untimed ones."""
    torch.set_num_threads(trainer.cfg.threads)
    for batch in batches[:warmup]:
        trainer.train_step(batch)
    timed = batches[warmup : warmup + steps]
    wall, cpu = time.perf_counter(), time.process_time()
    for batch in timed:
        trainer.train_step(batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tokens = sum(b.n_tokens for b in timed)
    return tokens / wall, tokens / cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.train_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", required=True, help="prepared folder with the config's training split")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--autocast", nargs="+", default=["none", "bf16"], choices=["none", "bf16"])
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--variant", action="append", default=[], help="KEY=VALUE[,KEY=VALUE] model settings")
    parser.add_argument("--loss", nargs="+", default=["projected"], choices=["projected", "logits"])
    args = parser.parse_args(argv)

    run = RunConfig.load(args.config)
    tokenizer = Tokenizer(args.tokenizer)
    batches = _batches(run, args.data, tokenizer, args.pairs, args.warmup + args.steps)
    torch.manual_seed(run.train.seed)
    from model.transformer import Transformer

    initial = Transformer(run.model).state_dict()
    runs = {"config": run} | {v: _variant(run, v) for v in args.variant}
    variants = [
        (m, t, "" if a == "none" else a, loss)
        for m in runs
        for loss in args.loss
        for a in args.autocast
        for t in args.threads
    ]
    results: dict[tuple[str, int, str, str], list[tuple[float, float]]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for model, threads, autocast, loss in variants:
            trainer = _trainer(runs[model], tokenizer, threads, autocast, loss, initial)
            results[(model, threads, autocast, loss)].append(measure(trainer, batches, args.warmup, args.steps))
    capability = torch.backends.cpu.get_cpu_capability()
    parameters = Transformer(run.model).num_parameters()
    print(f"# {run.name}: {parameters:,} parameters; {cpu_model()}, torch {torch.__version__} ({capability})")
    print(f"# {args.steps} timed steps of {run.train.max_tokens} padded tokens, median of {args.repeats} repeats\n")
    print("| model | loss | threads | autocast | target tok/s | tok per CPU-s | vs first |")
    print("|---|---|---:|---|---:|---:|---:|")
    first = None
    for (model, threads, autocast, loss), values in results.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        first = first or wall
        print(f"| {model} | {loss} | {threads} | {autocast or 'fp32'} | {wall:.0f} | {cpu:.0f} | {wall / first:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
