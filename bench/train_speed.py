"""Training speed of one run config: target tokens per second by thread count and autocast, side by side.

    python -m bench.train_speed --config configs/general_de_zh_en.json --data runs/data/general \
        --tokenizer runs/tok/general16000.model [--threads 1 2] [--autocast none bf16] [--steps 8] [--repeats 2]

Every variant runs the Trainer's own ``train_step`` (forward, label-smoothed loss, backward, clipping, Adam)
on the same real batches: the first ``--pairs`` training pairs, batched by the config's ``max_tokens`` and
drawn with a fixed seed. Each variant starts from the same initial weights, takes ``--warmup`` steps that are
not timed, then ``--steps`` timed ones; repeats are interleaved across variants and the median is reported.
Nothing else may run on the machine meanwhile (a training run sharing the cores makes every figure wrong).
"""

from __future__ import annotations

import argparse
import copy
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


def _trainer(run: RunConfig, tokenizer: Tokenizer, threads: int, autocast: str, initial: dict) -> Trainer:
    from model.transformer import Transformer

    run = copy.deepcopy(run)
    run.train.threads, run.train.autocast = threads, autocast
    model = Transformer(run.model)
    model.load_state_dict(initial)
    optimizer, scheduler = build_optimizer(run, model)
    data = TrainingData([], [], [], [])
    return Trainer(run, tokenizer, data, model, optimizer, scheduler, "/nonexistent", progress=False)


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
    args = parser.parse_args(argv)

    run = RunConfig.load(args.config)
    tokenizer = Tokenizer(args.tokenizer)
    batches = _batches(run, args.data, tokenizer, args.pairs, args.warmup + args.steps)
    torch.manual_seed(run.train.seed)
    from model.transformer import Transformer

    initial = Transformer(run.model).state_dict()
    variants = [(t, "" if a == "none" else a) for a in args.autocast for t in args.threads]
    results: dict[tuple[int, str], list[tuple[float, float]]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for threads, autocast in variants:
            trainer = _trainer(run, tokenizer, threads, autocast, initial)
            results[(threads, autocast)].append(measure(trainer, batches, args.warmup, args.steps))
    capability = torch.backends.cpu.get_cpu_capability()
    parameters = Transformer(run.model).num_parameters()
    print(f"# {run.name}: {parameters:,} parameters; {cpu_model()}, torch {torch.__version__} ({capability})")
    print(f"# {args.steps} timed steps of {run.train.max_tokens} padded tokens, median of {args.repeats} repeats\n")
    print("| threads | autocast | target tok/s | tok per CPU-s | vs first |")
    print("|---:|---|---:|---:|---:|")
    first = None
    for (threads, autocast), values in results.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        first = first or wall
        print(f"| {threads} | {autocast or 'fp32'} | {wall:.0f} | {cpu:.0f} | {wall / first:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
