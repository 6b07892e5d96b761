"""The real service (``python -m service``'s own main) made to leak, so that tests can show the soak catches a leak.

Like tests/fault_injection.py this launcher passes ``wrap_runner`` to the app: every engine batch opens /dev/null and
never closes it (one file descriptor), and keeps LEAK_BYTES_PER_BATCH of memory, up to LEAK_CAP_BYTES in all. Started by
tests as ``LiveServer(..., command=COMMAND)``.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

# 1 MiB a batch: +10% of the tiny server's ~200 MiB RSS within 20 batches, so the soak fails even on a machine slow
# enough to run only a few batches a second. At most LEAK_BYTES_PER_SECOND since the first batch: a fast machine runs
# hundreds of batches a second, and without this bound it reached the cap within the soak's first (warm-up) interval,
# so that the baseline already held the whole leak and the RSS check passed (CI, 2026-12-05: +5.9% on 1262 MiB).
LEAK_BYTES_PER_BATCH = 1024 * 1024
LEAK_BYTES_PER_SECOND = 16 * 1024 * 1024
LEAK_CAP_BYTES = 1024 * 1024 * 1024

COMMAND = [sys.executable, "-c", f"import runpy; runpy.run_path({str(Path(__file__))!r}, run_name='__main__')"]

_descriptors: list[int] = []
_memory: list[bytes] = []
_first_batch: dict[str, float] = {}  # "at": the first batch's time


def leak(runner, engine):
    def run_batch(options, sources):
        _descriptors.append(os.open(os.devnull, os.O_RDONLY))
        now = time.monotonic()
        started = _first_batch.setdefault("at", now)
        held = (len(_memory) + 1) * LEAK_BYTES_PER_BATCH
        if held <= LEAK_CAP_BYTES and held <= LEAK_BYTES_PER_BATCH + (now - started) * LEAK_BYTES_PER_SECOND:
            _memory.append(b"x" * LEAK_BYTES_PER_BATCH)  # written pages: resident, unlike a fresh bytearray
        return runner(options, sources)

    return run_batch


if __name__ == "__main__":
    main = runpy.run_module("service.__main__")["main"]
    sys.exit(main(wrap_runner=leak))
