"""What the benchmark reports say about the machine: the CPU model and the vector extensions the speed of int8 and
float matrix products depends on (from /proc/cpuinfo where there is one). Two VMs both called "AMD EPYC" measured
onnxruntime's int8 MatMul at 400 and 137 G(FL)OP/s (AVX-512 VNNI against AVX2 only): the extensions say which."""

from __future__ import annotations

import platform
from pathlib import Path

VECTOR_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")  # in this order


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_flags(text: str | None = None) -> list[str]:
    """The vector extensions in ``VECTOR_FLAGS`` the first CPU of /proc/cpuinfo (or ``text``) has."""
    for line in (_cpuinfo() if text is None else text).splitlines():
        if line.startswith("flags"):
            present = set(line.split(":", 1)[1].split())
            return [f for f in VECTOR_FLAGS if f in present]
    return []


def cpu_model(default: str | None = None) -> str:
    """The CPU's model name, with its vector extensions in brackets when /proc/cpuinfo lists them."""
    text = _cpuinfo()
    flags = cpu_flags(text)
    suffix = f" [{' '.join(flags)}]" if flags else ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip() + suffix
    return (platform.processor() or default or platform.machine() or "unknown CPU") + suffix
