"""The real service (``python -m service``'s own main) made to leak, so that tests can show the soak catches a leak.

Like tests/fault_injection.py this launcher passes ``wrap_runner`` to the app: every engine batch opens /dev/null and
never closes it (one file descriptor), and keeps LEAK_BYTES_PER_BATCH of memory, up to LEAK_CAP_BYTES. Started by
tests as ``LiveServer(..., command=COMMAND)``.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

LEAK_BYTES_PER_BATCH = 512 * 1024
LEAK_CAP_BYTES = 400 * 1024 * 1024

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
