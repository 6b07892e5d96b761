"""Keep freed large buffers in the process: glibc's malloc tunables for a training run.

glibc serves every allocation above its mmap threshold (at most 32 MB when it adjusts itself) with a fresh
``mmap`` and returns it with ``munmap`` when freed. A training step of the 24k-vocabulary models allocates and
frees (tokens, vocabulary) logits and their gradient, about 170 MB each, so every step pays the kernel to map and
zero some 80,000 new pages. Raising the mmap and trim thresholds makes malloc keep that memory for the next step:
1.22x training speed on the d384-6-2 model (docs/models-round3.md, "Training speed"). The tunables are read when
the process starts, so ``python -m model.cli train`` re-executes itself once with them set.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping

ENV = "GLIBC_TUNABLES"
TUNABLES = "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295"
OPT_OUT = "MTSERVE_MALLOC"  # "default": leave malloc as it is


def tuned_environment(env: Mapping[str, str], libc: str | None = None) -> dict[str, str] | None:
    """The environment to re-execute with, or None where there is nothing to change.

    Nothing changes off glibc, where the caller opted out (``MTSERVE_MALLOC=default``), or where the mmap
    threshold is already set (by the user, or by the re-executed process itself). Other tunables are kept."""
    libc = platform.libc_ver()[0] if libc is None else libc
    current = env.get(ENV, "")
    if libc != "glibc" or env.get(OPT_OUT) == "default" or "glibc.malloc.mmap_threshold" in current:
        return None
    return dict(env) | {ENV: f"{current}:{TUNABLES}" if current else TUNABLES}
