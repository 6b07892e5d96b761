"""Training curve PNG: the losses on the left, validation BLEU (mean and per direction) on the right."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_training_curve(history: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        return
    steps = [h["step"] for h in history]
    directions = sorted({d for h in history for d in h.get("valid_bleu_directions", {})})
    fig, (loss_ax, bleu_ax) = plt.subplots(1, 2, figsize=(11 if directions else 10, 4), dpi=100)
    loss_ax.plot(steps, [h["train_loss"] for h in history], label="train loss (label-smoothed)", color="tab:blue")
    loss_ax.plot(steps, [h["valid_nll"] for h in history], label="validation NLL", color="tab:orange")
    loss_ax.set_ylabel("loss (nats / token)")
    loss_ax.set_title("Loss")
    bleu_ax.plot(steps, [h["valid_bleu"] for h in history], label="mean" if directions else "validation",
                 color="black", marker="o", ms=3, lw=2)  # fmt: skip
    for direction in directions:
        points = [(h["step"], h["valid_bleu_directions"][direction]) for h in history
                  if direction in h.get("valid_bleu_directions", {})]  # fmt: skip
        bleu_ax.plot(*zip(*points, strict=True), label=direction, linestyle="--", marker=".", ms=4)
    bleu_ax.set_ylabel("BLEU")
    bleu_ax.set_title("Validation BLEU" + (" per direction" if directions else ""))
    for ax in (loss_ax, bleu_ax):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    loss_ax.legend(loc="upper right")
    bleu_ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0) if directions else None, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
