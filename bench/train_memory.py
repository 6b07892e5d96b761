"""Memory of a run's training data: the corpus encoded in memory (the default) vs streamed from shards.

    python -m bench.train_memory --config configs/general_de_zh_en.json --data runs/data/general \
        --tokenizer runs/general/tokenizer.model --shards runs/shards/general [--shard-pairs 100000]

Each way runs in a fresh process, which reports its peak resident set (VmHWM) and its anonymous memory
(RssAnon: what cannot be dropped; memory-mapped shard pages are file-backed, the kernel can drop them) after
the imports and after one epoch's batches: in memory, ``load_data``'s encoded pairs and the epoch's order;
streamed, every batch of one epoch read from the shards. ``--shards`` is written first when it has no
manifest (the writer's own peak is a third row). Timing-free: the figures hold on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def memory_status() -> dict[str, int]:
    """VmHWM, VmRSS and RssAnon of this process, in MiB (Linux /proc/self/status)."""
    wanted = ("VmHWM", "VmRSS", "RssAnon")
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in wanted:
            values[key] = int(rest.split()[0]) // 1024
    return values


def measure(way: str, config: str, data: str, tokenizer: str, shards: str, shard_pairs: int) -> dict:
    """One way's figures, in this process: ``memory``, ``streamed`` or ``write`` (the shard writer)."""
    from model.config import RunConfig
    from model.data import ExampleBatches
    from model.shards import ShardReader, write_shards
    from model.tokenizer import Tokenizer
    from model.train import load_data

    run = RunConfig.load(config)
    tok = Tokenizer(tokenizer)
    after_imports = memory_status()
    if way == "write":
        prefix = Path(data) / run.train_prefix
        manifest = write_shards(
            tok,
            f"{prefix}.{run.source_lang}",
            f"{prefix}.{run.target_lang}",
            shards,
            run.train.max_length,
            shard_pairs,
            run.train.seed,
        )
        pairs, batches = manifest["pairs"], 0
    elif way == "memory":
        training = load_data(run, data, tok)
        source = ExampleBatches(training.train_examples, run.train.max_tokens, run.train.seed)
        pairs, batches = source.pairs, source.epoch_size(0)
    else:
        source = ShardReader(shards, tok).batches(run.train.max_tokens, run.train.seed)
        pairs, batches = source.pairs, 0
        for key in source.epoch_order(0):
            source.batch(key)
            batches += 1
    return {"way": way, "pairs": pairs, "batches": batches, "after_imports": after_imports, "end": memory_status()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.train_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--data", required=True, help="prepared folder with the config's training split")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--shards", required=True, help="shard folder (written first when it has no manifest)")
    parser.add_argument("--shard-pairs", type=int, default=100_000)
    parser.add_argument("--way", choices=["memory", "streamed", "write"], help=argparse.SUPPRESS)  # one child
    args = parser.parse_args(argv)
    common = [args.config, args.data, args.tokenizer, args.shards, args.shard_pairs]
    if args.way:
        print(json.dumps(measure(args.way, *common)))
        return 0

    ways = ([] if (Path(args.shards) / "manifest.json").exists() else ["write"]) + ["memory", "streamed"]
    rows = []
    given = sys.argv[1:] if argv is None else argv
    for way in ways:  # each in a fresh process: its own peak
        child = [sys.executable, "-m", "bench.train_memory", *given, "--way", way]
        out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"# {args.config}: training pairs of {args.data}; max_tokens from the config; MiB\n")
    print("| data | pairs | batches | peak RSS | RSS after imports | anonymous at the end | peak - imports |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    names = {"memory": "in memory (load_data)", "streamed": "streamed shards, one epoch", "write": "shard writer"}
    for r in rows:
        peak, base = r["end"]["VmHWM"], r["after_imports"]["VmRSS"]
        print(
            f"| {names[r['way']]} | {r['pairs']:,} | {r['batches']:,} | {peak:,} | {base:,} | "
            f"{r['end']['RssAnon']:,} | {peak - base:,} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
