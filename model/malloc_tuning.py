"""The allocator of a training run: tcmalloc where it is installed, else glibc's malloc with raised thresholds.

glibc serves every allocation above its mmap threshold (at most 32 MB when it adjusts itself) with a fresh
``mmap`` and returns it with ``munmap`` when freed, so a step that frees and allocates buffers of tens or hundreds
of MB pays the kernel to map and zero their pages again every time. Raising the mmap and trim thresholds makes
malloc keep that memory for the next step: 1.22x training speed on the d384-6-2 model while a step still
allocated its (tokens, vocabulary) logits, 1.06x since model/losses.py reuses one buffer for them
(docs/models-round3.md, "Training speed"). But kept memory fragments: batches of other shapes leave free holes
that a larger request cannot fill, and the heap grows around them (the d384-6-2 run: 7.5 to 10.8 GB resident in
29 minutes, most of the heap free chunks). tcmalloc, preloaded, kept the same run's resident memory flat at 5.5 GB,
at the same speed within what was measured (1,725-1,796 steps an hour in the run against 1,516-1,688 under the
tunables; a short bench.train_speed had it at 1,498 target tokens/s against 1,681).

Both are chosen when the process starts, so ``python -m model.cli train`` re-executes itself once with
``tuned_environment``. Under the tunables the trainer gives the free chunks' pages back after each checkpoint
(``release_free_memory``; they come back within minutes) and a one-process run asks ``restart_for_memory``:
resident memory above ``RESTART_FRACTION`` of the machine's, a third of it or more in free heap chunks. The command
then starts itself again from ``last.pt`` with a fresh heap (about a minute).
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
PRELOAD = "LD_PRELOAD"
TCMALLOC = "tcmalloc_minimal"  # gperftools' allocator without its profiler (Debian: libtcmalloc-minimal4)
# "default": leave malloc as it is; "tunables": glibc's tunables even where tcmalloc is installed; else tcmalloc
# where it is installed, the tunables on other glibc systems
OPT_OUT = "MTSERVE_MALLOC"
RESTART_FRACTION = 0.6  # of the machine's memory: above it, a fragmented heap restarts the run (restart_for_memory)


def tcmalloc_library() -> str | None:
    """The name ``LD_PRELOAD`` loads tcmalloc by (e.g. ``libtcmalloc_minimal.so.4``), or None where it is absent."""
    return ctypes.util.find_library(TCMALLOC)


def tuned_environment(
    env: Mapping[str, str], libc: str | None = None, tcmalloc: str | None | bool = True
) -> dict[str, str] | None:
    """The environment to re-execute with, or None where there is nothing to change.

    tcmalloc preloaded where it is installed (``tcmalloc``: its name, None for absent, True to look it up): as
    fast as glibc with the tunables and its resident memory stays flat. Else, on glibc, the tunables. Nothing
    changes where the caller opted out (``MTSERVE_MALLOC=default``), or where tcmalloc is already preloaded or the
    mmap threshold already set (by the user, or by the re-executed process itself). Other settings are kept."""
    choice = env.get(OPT_OUT, "")
    current, preloaded = env.get(ENV, ""), env.get(PRELOAD, "")
    if choice == "default" or "glibc.malloc.mmap_threshold" in current or TCMALLOC in preloaded:
        return None
    if choice != "tunables":
        library = tcmalloc_library() if tcmalloc is True else tcmalloc
        if library:
            return dict(env) | {PRELOAD: f"{library}:{preloaded}" if preloaded else str(library)}
    libc = platform.libc_ver()[0] if libc is None else libc
    if libc != "glibc":
        return None
    return dict(env) | {ENV: f"{current}:{TUNABLES}" if current else TUNABLES}


def allocator(env: Mapping[str, str] | None = None) -> str:
    """Which allocator this process runs with, in words (the train command prints it)."""
    env = os.environ if env is None else env
    if TCMALLOC in env.get(PRELOAD, ""):
        return "tcmalloc"
    if TUNABLES in env.get(ENV, ""):
        return "glibc, thresholds raised"
    return "default"


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
