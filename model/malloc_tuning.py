"""Keep freed large buffers in the process: glibc's malloc tunables for a training run.

glibc serves every allocation above its mmap threshold (at most 32 MB when it adjusts itself) with a fresh
``mmap`` and returns it with ``munmap`` when freed. A training step of the 24k-vocabulary models allocates and
frees (tokens, vocabulary) logits and their gradient, about 170 MB each, so every step pays the kernel to map and
zero some 80,000 new pages. Raising the mmap and trim thresholds makes malloc keep that memory for the next step:
1.22x training speed on the d384-6-2 model (docs/models-round3.md, "Training speed"). The tunables are read when
the process starts, so ``python -m model.cli train`` re-executes itself once with them set.

Kept memory is not only reused: batches of other shapes leave free holes that a larger request cannot fill, and
the heap grows around them (the d384-6-2 run: 8.7 to 14.2 GB resident in 50 minutes; later 1.8 GB in use in a
10.7 GB heap). The trainer calls ``release_free_memory`` after each checkpoint, which lowers resident memory by
2-3 GB until the steps touch the free chunks again; it does not stop the heap's growth (docs/models-round3.md,
"Training speed"), so a run of many hours without a restart should opt out.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
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


@functools.cache
def _libc_trim():
    if platform.libc_ver()[0] != "glibc":
        return None
    trim = getattr(ctypes.CDLL(ctypes.util.find_library("c")), "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Give the pages of every free malloc chunk back to the kernel (glibc's ``malloc_trim(0)``), whatever the
    trim threshold; the memory stays mapped and is faulted in again when reused. False where there is no glibc."""
    trim = _libc_trim()
    if trim is None:
        return False
    trim(0)
    return True
