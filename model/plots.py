"""Training curve PNG: losses and validation BLEU against step."""

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
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, [h["train_loss"] for h in history], label="train loss (label-smoothed)", color="tab:blue")
    ax.plot(steps, [h["valid_nll"] for h in history], label="validation NLL", color="tab:orange")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / token)")
    bleu_ax = ax.twinx()
    bleu_ax.plot(
        steps, [h["valid_bleu"] for h in history], label="validation BLEU", color="tab:green", marker="o", ms=3
    )
    for direction in sorted({d for h in history for d in h.get("valid_bleu_directions", {})}):
        points = [(h["step"], h["valid_bleu_directions"][direction]) for h in history
                  if direction in h.get("valid_bleu_directions", {})]  # fmt: skip
        bleu_ax.plot(*zip(*points, strict=True), label=f"BLEU {direction}", linestyle="--", marker=".", ms=3)
    bleu_ax.set_ylabel("BLEU")
    lines = ax.get_lines() + bleu_ax.get_lines()
    ax.legend(lines, [line.get_label() for line in lines], loc="center right")
    ax.grid(alpha=0.3)
    ax.set_title("Training curve")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
