"""The output projection and the label-smoothed loss of one training batch: logits then loss, or projected together.

    python -m bench.output_loss [--rows 128] [--length 30] [--d-model 384] [--vocab 24000] [--threads 2]
        [--repeats 5]

"logits" is what a training step did before model/losses.py's projected_label_smoothed_nll: ``nn.Linear`` under
bfloat16 autocast makes the (tokens, vocabulary) logits, ``label_smoothed_nll`` the loss, autograd the backward
through both. "projected" is projected_label_smoothed_nll: the same loss and gradients, the padding rows left
out, the logits written into a buffer reused from call to call and overwritten with their gradient. Each figure
is the best of ``--repeats`` forward + backward passes on the same random batch, whose targets end in padding as
length-sorted batches do. The allocator matters (freed buffers of 100+ MB): run it as training runs,
under ``GLIBC_TUNABLES`` of model/malloc_tuning.py, and without. Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

from bench.harness import cpu_model
from model.losses import label_smoothed_nll, projected_label_smoothed_nll
from model.malloc_tuning import ENV


def _batch(rows: int, length: int, d_model: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(rows, length, d_model, generator=g)
    target = torch.randint(4, vocab, (rows, length), generator=g)
    lengths = torch.randint(max(1, length - length // 6), length + 1, (rows,), generator=g)
    target[torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    return hidden, target


def _logits_pass(output: nn.Linear, hidden: torch.Tensor, target: torch.Tensor) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = output(hidden)
    loss, _ = label_smoothed_nll(logits, target, 0.1, 0)
    loss.backward()


def _projected_pass(output: nn.Linear, hidden: torch.Tensor, target: torch.Tensor) -> None:
    loss, _ = projected_label_smoothed_nll(hidden, output.weight, output.bias, target, 0.1, 0, torch.bfloat16)
    loss.backward()


def _best(fn, output: nn.Linear, hidden: torch.Tensor, target: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):  # the first pass warms the allocator and oneDNN's kernels up
        output.zero_grad(set_to_none=True)
        h = hidden.detach().requires_grad_()
        start = time.perf_counter()
        fn(output, h, target)
        times.append(time.perf_counter() - start)
    return min(times[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.output_loss", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--length", type=int, default=30)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--vocab", type=int, default=24000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    output = nn.Linear(args.d_model, args.vocab, bias=False)
    hidden, target = _batch(args.rows, args.length, args.d_model, args.vocab)
    tokens = int((target != 0).sum())
    rows = [("logits, then label_smoothed_nll", _best(_logits_pass, output, hidden, target, args.repeats))]
    rows.append(("projected_label_smoothed_nll", _best(_projected_pass, output, hidden, target, args.repeats)))
    padded = args.rows * args.length
    tunables = os.environ.get(ENV, "") or "glibc defaults"
    print(f"# {cpu_model()}, torch {torch.__version__}, {args.threads} threads, bfloat16 products; malloc: {tunables}")
    print(
        f"# ({args.rows}, {args.length}) targets, {tokens} of them not padding; d_model {args.d_model}, "
        f"vocabulary {args.vocab}; forward + backward, best of {args.repeats}\n"
    )
    print("| output projection and loss | seconds | vs first |")
    print("|---|---:|---:|")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.3f} | {rows[0][1] / seconds:.2f}x |")
    print(f"\n# {padded} positions, {padded - tokens} padding")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
