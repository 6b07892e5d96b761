"""Markdown tables of ``export.cli evaluate --report`` files, for model cards and release notes.

``scores`` gives one variant's rows (split, sentences, BLEU / chrF / loops for each beam), each with the same row of
a baseline report beside it when one is given (the model the release replaces, evaluated on the same splits);
``variants`` gives BLEU of every variant on every split, side by side. ``python -m export.cli tables --report
checkpoints/general/evaluation.de-en.json --baseline runs/eval/de-en-2.json`` prints both.
"""

from __future__ import annotations

from typing import Any


def _beams(report: dict[str, Any]) -> list[str]:
    found = {beam for splits in report.values() for scores in splits.values() for beam in scores if beam[:4] == "beam"}
    return sorted(found, key=lambda b: int(b[4:]))


def _search(beam: str) -> str:
    return "greedy" if beam == "beam1" else f"beam {beam[4:]}"


def _cells(scores: dict[str, Any], beams: list[str], metric: str, digits: int) -> str:
    values = [scores.get(beam, {}).get(metric) for beam in beams]
    return " / ".join("-" if v is None else f"{v:.{digits}f}" for v in values)


def scores(report: dict[str, Any], variant: str, baseline: dict[str, Any] | None = None) -> str:
    """One row per split of ``variant``: sentences, BLEU, chrF and loops for each beam; with ``baseline``, its BLEU
    and loops on the same split (any variant of it with that split: the one named ``variant`` first)."""
    if variant not in report:
        raise ValueError(f"the report has no {variant} scores (it has {', '.join(report) or 'none'})")
    beams = _beams(report)
    searches = " / ".join(_search(b) for b in beams)
    head = f"| split | sentences | BLEU {searches} | chrF {searches} | loops {searches} |"
    rule = "|---|---:|---|---|---|"
    if baseline is not None:
        head += f" BLEU before {searches} | loops before {searches} |"
        rule += "---|---|"
    lines = [head, rule]
    for split, split_scores in report[variant].items():
        sentences = next((s["n_sentences"] for s in split_scores.values() if isinstance(s, dict)), 0)
        row = (
            f"| {split} | {sentences:,} | {_cells(split_scores, beams, 'bleu', 2)} | "
            f"{_cells(split_scores, beams, 'chrf', 2)} | {_cells(split_scores, beams, 'loops', 0)} |"
        )
        if baseline is not None:
            before = baseline.get(variant, {}).get(split) or next(
                (splits[split] for splits in baseline.values() if split in splits), {}
            )
            row += f" {_cells(before, beams, 'bleu', 2)} | {_cells(before, beams, 'loops', 0)} |"
        lines.append(row)
    return "\n".join(lines)


def variants(report: dict[str, Any]) -> str:
    """BLEU of every variant on every split, one column per variant, each cell the beams' scores."""
    names = list(report)
    beams = _beams(report)
    splits = list(dict.fromkeys(split for v in names for split in report[v]))
    searches = " / ".join(_search(b) for b in beams)
    lines = [f"| split ({searches}) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for split in splits:
        cells = [_cells(report[v].get(split, {}), beams, "bleu", 2) for v in names]
        lines.append(f"| {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
