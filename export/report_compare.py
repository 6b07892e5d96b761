"""Two ``export.cli evaluate --report`` files side by side: BLEU per variant, split and beam, and the largest loss.

The release uses it to decide whether a bundle keeps its lexical shortlist (issue 33: "BLEU within 0.2 of the
full vocabulary on every test set"): the same bundle evaluated with ``--no-shortlist`` (the base) and with its
shortlist (the candidate); a loss above ``max_loss`` on any row refuses the shortlist.
"""

from __future__ import annotations

from typing import Any


def compare(base: dict[str, Any], candidate: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows (variant, split, beam, base BLEU, candidate BLEU, delta) for every score both reports hold."""
    rows = []
    for variant, splits in base.items():
        for split, scores in splits.items():
            other = candidate.get(variant, {}).get(split, {})
            for beam, result in scores.items():
                if not beam.startswith("beam") or beam not in other:
                    continue
                a, b = result["bleu"], other[beam]["bleu"]
                rows.append(
                    {"variant": variant, "split": split, "beam": beam, "base": a, "candidate": b, "delta": b - a}
                )
    if not rows:
        raise ValueError("the two reports share no variant, split and beam")
    return rows


def table(rows: list[dict[str, Any]], max_loss: float) -> str:
    lines = ["| variant | split | search | base BLEU | candidate BLEU | delta |", "|---|---|---|---:|---:|---:|"]
    for r in rows:
        flag = " **over**" if -r["delta"] > max_loss else ""
        lines.append(
            f"| {r['variant']} | {r['split']} | {r['beam']} | {r['base']:.2f} | {r['candidate']:.2f} | "
            f"{r['delta']:+.2f}{flag} |"
        )
    return "\n".join(lines)


def within(rows: list[dict[str, Any]], max_loss: float) -> bool:
    """Whether no row loses more than ``max_loss`` BLEU."""
    return all(-r["delta"] <= max_loss + 1e-9 for r in rows)
