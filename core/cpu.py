"""The CPU's feature flags, read once from /proc/cpuinfo: what training (bf16 autocast), serving (the fused step's
auto rule) and the benchmarks' machine line decide or report by."""

from __future__ import annotations

from pathlib import Path


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The first CPU's feature flags from /proc/cpuinfo (or the text ``cpuinfo``); empty where there is none."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()
