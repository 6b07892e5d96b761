"""The real service (``python -m service``'s own main) made to leak, so that tests can show the soak catches a leak.

Like tests/fault_injection.py this launcher passes ``wrap_runner`` to the app: every engine batch opens /dev/null and
never closes it (one file descriptor), and keeps LEAK_BYTES_PER_BATCH of memory, up to LEAK_CAP_BYTES in all. Started by
tests as ``LiveServer(..., command=COMMAND)``.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

# 1 MiB a batch: +10% of the tiny server's ~200 MiB RSS within 20 batches, so the soak fails even on a machine slow
# enough to run only a few batches a second. The cap bounds the test's memory; it must not be reached within the
# soak's first (warm-up) interval, or the baseline would already hold the whole leak.
LEAK_BYTES_PER_BATCH = 1024 * 1024
LEAK_CAP_BYTES = 1024 * 1024 * 1024

COMMAND = [sys.executable, "-c", f"import runpy; runpy.run_path({str(Path(__file__))!r}, run_name='__main__')"]

_descriptors: list[int] = []
_memory: list[bytes] = []


def leak(runner, engine):
    def run_batch(options, sources):
        _descriptors.append(os.open(os.devnull, os.O_RDONLY))
        if (len(_memory) + 1) * LEAK_BYTES_PER_BATCH <= LEAK_CAP_BYTES:
            _memory.append(b"x" * LEAK_BYTES_PER_BATCH)  # written pages: resident, unlike a fresh bytearray
        return runner(options, sources)

    return run_batch


if __name__ == "__main__":
    main = runpy.run_module("service.__main__")["main"]
    sys.exit(main(wrap_runner=leak))
