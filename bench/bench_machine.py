"""What the benchmark reports say about the machine: the CPU model (from /proc/cpuinfo where there is one)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model(default: str | None = None) -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or default or platform.machine() or "unknown CPU"
