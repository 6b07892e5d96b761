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
"Training speed"). So a one-process run under these tunables also asks, at each checkpoint, whether
``restart_for_memory``: resident memory above ``RESTART_FRACTION`` of the machine's, a third of it or more in free
heap chunks. The command then starts itself again from ``last.pt`` with an unfragmented heap (about a minute).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
from collections.abc import Mapping

ENV = "GLIBC_TUNABLES"
TUNABLES = "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295"
OPT_OUT = "MTSERVE_MALLOC"  # "default": leave malloc as it is
RESTART_FRACTION = 0.6  # of the machine's memory: above it, a fragmented heap restarts the run (restart_for_memory)


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


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def heap_free_bytes() -> int | None:
    """Bytes held in free malloc chunks, every arena together (glibc's ``mallinfo2().fordblks``, glibc 2.33 and
    later); None elsewhere."""
    if platform.libc_ver()[0] != "glibc":
        return None
    info = getattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallinfo2", None)
    if info is None:
        return None
    info.restype = _MallInfo2
    return int(info().fordblks)


def resident_bytes() -> int | None:
    """This process's resident memory (``/proc/self/statm``); None where there is no /proc."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def machine_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


class RestartForMemory(Exception):
    """The run's heap is fragmented past the bound: ``last.pt`` is written, the command should start again."""

    def __init__(self, step: int, resident: int, free: int) -> None:
        self.step, self.resident, self.free = step, resident, free
        super().__init__(
            f"resident memory {resident / 1e9:.1f} GB, {free / 1e9:.1f} GB of it in free heap chunks (the malloc "
            f"tunables' holes, model/malloc_tuning.py): restarting from last.pt at step {step}"
        )


def restart_for_memory(
    env: Mapping[str, str] | None = None,
    resident: int | None = None,
    free: int | None = None,
    total: int | None = None,
) -> tuple[int, int] | None:
    """(resident, free) where a restart would give memory back, else None: this process runs under ``TUNABLES``,
    its resident memory is above ``RESTART_FRACTION`` of the machine's and at least a third of it is free heap.
    Call it before ``release_free_memory`` (which gives the free chunks' pages back only until they are reused)."""
    env = os.environ if env is None else env
    if TUNABLES not in env.get(ENV, ""):
        return None
    resident = resident_bytes() if resident is None else resident
    free = heap_free_bytes() if free is None else free
    total = machine_bytes() if total is None else total
    if resident is None or free is None or not total:
        return None
    return (resident, free) if resident > RESTART_FRACTION * total and free * 3 >= resident else None
