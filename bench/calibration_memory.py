"""Peak memory of ``import-hf`` with int8 calibration, against calibration sentences and vocabulary size.

    python -m bench.calibration_memory --data ../shared/data/multi30k --vocab 8000 32000 --sentences 16 64

builds one small random Marian checkpoint per vocabulary size (bench/marian_random.py's tokenizer and weights;
--d-model, --layers and --ffn set the shape) and imports it (fp32 and int8) once per sentence count, each import in
its own process, whose peak resident memory (ru_maxrss) is printed with the import's seconds. The step graphs'
calibration feeds grow with the translations' lengths: a random model rarely ends a sentence, so --max-length caps the
decoding (the checkpoint's generation max_length) to keep the runs short.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def build(out: Path, data: Path, vocab_size: int, args: argparse.Namespace) -> Path:
    import json

    from bench.marian_random import write_checkpoint, write_tokenizer

    checkpoint = out / f"checkpoint-{vocab_size}"
    checkpoint.mkdir(parents=True, exist_ok=True)
    lines = []
    for language in (args.source, args.target):
        lines += (data / f"train.{language}").read_text(encoding="utf-8").splitlines()[: args.lines]
    vocab = write_tokenizer(checkpoint, lines, args.spm_vocab, vocab_size)
    shape = argparse.Namespace(
        d_model=args.d_model,
        layers=args.layers,
        heads=args.heads,
        ffn=args.ffn,
        seed=0,
        init_std=0.3,
        source=args.source,
        target=args.target,
    )
    write_checkpoint(checkpoint, vocab, shape)
    generation = json.loads((checkpoint / "generation_config.json").read_text())
    generation["max_length"] = args.max_length
    (checkpoint / "generation_config.json").write_text(json.dumps(generation))
    return checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration_memory", description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", default="build/calibration-memory")
    parser.add_argument("--source", default="de")
    parser.add_argument("--target", default="en")
    parser.add_argument("--vocab", type=int, nargs="+", default=[8000, 32000])
    parser.add_argument("--sentences", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=256)
    parser.add_argument("--spm-vocab", type=int, default=2000)
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--max-length", type=int, default=64)
    args = parser.parse_args(argv)

    out, data = Path(args.out), Path(args.data)
    print("vocab sentences peak_rss_mb seconds status", flush=True)
    for vocab_size in args.vocab:
        checkpoint = build(out, data, vocab_size, args)
        for count in args.sentences:
            command = [sys.executable, "-m", "export.cli", "import-hf", "--from", str(checkpoint), "--name", "m"]
            command += ["--version", "1", "--repository", str(out / f"repo-{vocab_size}-{count}"), "--force"]
            command += ["--variants", "fp32", "int8", "--calibration-data", str(data / f"train.{args.source}")]
            command += ["--calibration-sentences", str(count)]
            started = time.time()
            child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(child.pid, 0)  # this child's own peak (RUSAGE_CHILDREN keeps the largest)
            child.returncode = os.waitstatus_to_exitcode(status)
            seconds = time.time() - started  # exit 1: written, but the graph parity check failed (a random model)
            peak = usage.ru_maxrss / 1024
            print(f"{vocab_size} {count} {peak:.0f} {seconds:.1f} exit {child.returncode}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
