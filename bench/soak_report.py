"""What bench/soak.py makes of its samples: the verdict, the markdown table and the PNG of the curves.

A sample is one interval's record: the server's RSS (MiB), open file descriptors and threads read from /proc once
the interval's load has ended and its connections are closed, the largest queue depth and requests in flight seen
during the interval (from /metrics), the requests by kind and status, each kind's p99 latency, the unexpected
answers. The verdict compares the last sample with the end of warm-up (the first ``warmup`` intervals).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.soak_mix import KINDS, SERVED_KINDS

MAX_GROWTH = 0.10  # RSS and descriptors may grow by less than this after warm-up
GROWING = {"rss_mb": "RSS", "fds": "open file descriptors"}


def verdict(
    samples: list[dict[str, Any]], unexpected: int, warmup: int = 1, max_growth: float = MAX_GROWTH
) -> list[str]:
    """The soak's promises, each 'ok: ...' or 'FAIL: ...': RSS and descriptors grow by less than ``max_growth``
    from the end of warm-up to the last sample, every kind of request was sent, every quiet sample settled (no
    request left in flight), no unexpected answer."""
    if len(samples) < warmup + 1:
        return [f"FAIL: {len(samples)} intervals: the verdict needs at least {warmup + 1} (warm-up, then a comparison)"]
    checks = []
    for key, name in GROWING.items():
        base, end = samples[warmup - 1][key], samples[-1][key]
        growth = (end - base) / base if base else float("inf")
        peak = max(s[key] for s in samples[warmup - 1 :])
        checks.append(
            ("ok" if growth < max_growth else "FAIL")
            + f": {name} {base:g} after warm-up, {end:g} at the end ({growth:+.1%}, bound +{max_growth:.0%}; "
            f"peak {peak:g})"
        )
    counts = totals(samples)
    missing = [kind for kind in KINDS if not sum(counts.get(kind, {}).values())]
    checks.append(
        ("FAIL" if missing else "ok")
        + f": every kind of request was sent ({', '.join(missing) + ' never' if missing else 'all ' + str(len(KINDS))})"
    )
    unsettled = [s["interval"] for s in samples if not s["settled"]]
    checks.append(
        ("FAIL" if unsettled else "ok")
        + ": after every interval the server had nothing in flight and its descriptors held still"
        + (f" (not after intervals {unsettled})" if unsettled else "")
    )
    checks.append(("ok" if unexpected == 0 else "FAIL") + f": {unexpected} unexpected answers")
    return checks


def totals(samples: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Requests by kind and status over all samples."""
    out: dict[str, dict[str, int]] = {}
    for sample in samples:
        for kind, statuses in sample["requests"].items():
            for status, n in statuses.items():
                out.setdefault(kind, {})[status] = out.setdefault(kind, {}).get(status, 0) + n
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def table(samples: list[dict[str, Any]]) -> str:
    """One row per interval."""
    p99_kinds = [k for k in SERVED_KINDS if k != "bad input"]
    lines = [
        "| minute | RSS MiB | fds | threads | queue depth max | in flight max | requests | unexpected | "
        + " | ".join(f"p99 ms {k}" for k in p99_kinds)
        + " |",
        "|---:" * (8 + len(p99_kinds)) + "|",
    ]
    for s in samples:
        n = sum(sum(statuses.values()) for statuses in s["requests"].values())
        lines.append(
            f"| {s['end_s'] / 60:.1f} | {s['rss_mb']:.1f} | {s['fds']} | {s['threads']} | {s['queue_depth_max']:g} "
            f"| {s['in_flight_max']:g} | {n} | {s['unexpected']} | "
            + " | ".join(_ms(s["p99_ms"].get(k)) for k in p99_kinds)
            + " |"
        )
    return "\n".join(lines)


def counts_table(samples: list[dict[str, Any]]) -> str:
    """Requests by kind and status over the whole soak."""
    counts = totals(samples)
    statuses = sorted({status for by_status in counts.values() for status in by_status})
    lines = ["| kind | " + " | ".join(statuses) + " |", "|---" + "|---:" * len(statuses) + "|"]
    for kind in KINDS:
        row = counts.get(kind, {})
        lines.append(f"| {kind} | " + " | ".join(str(row.get(status, "")) for status in statuses) + " |")
    return "\n".join(lines)


def plot(
    samples: list[dict[str, Any]], path: Path, title: str, warmup: int = 1, max_growth: float = MAX_GROWTH
) -> None:
    """RSS, descriptors, threads and each kind's p99 against time, one panel each; the growth bound dashed."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    minutes = [s["end_s"] / 60 for s in samples]
    fig = Figure(figsize=(10, 6.5), dpi=100)
    axes = fig.subplots(2, 2, sharex=True)
    for ax, key, label in (
        (axes[0][0], "rss_mb", "server RSS (MiB)"),
        (axes[0][1], "fds", "open file descriptors"),
        (axes[1][0], "threads", "threads"),
    ):
        values = [s[key] for s in samples]
        ax.plot(minutes, values, marker="o", ms=3)
        top = max(values, default=1)
        if key in GROWING and len(samples) >= warmup:
            bound = samples[warmup - 1][key] * (1 + max_growth)
            ax.axhline(bound, ls="--", color="tab:red", lw=1, label=f"+{max_growth:.0%} over warm-up")
            ax.legend(fontsize=7, loc="lower right")
            top = max(top, bound)
        ax.set_ylabel(label)
        ax.set_ylim(0, top * 1.1)
        ax.grid(alpha=0.3)
    ax = axes[1][1]
    for kind in SERVED_KINDS:
        ax.plot(minutes, [s["p99_ms"].get(kind, float("nan")) for s in samples], marker="o", ms=3, label=kind)
    ax.set_ylabel("p99 latency of the interval (ms)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
