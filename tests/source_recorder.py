"""The real service (``python -m service``'s own main) with every model's batch runner wrapped by a recorder: each
source's token ids, as the engine receives them, are appended as one JSON line ``{"model": ..., "ids": [...]}`` to
the file named by ``MT_TEST_SOURCE_LOG``. Tests of multilingual routing read it to see the tag each direction puts
before the source (tests/service/test_multi_direction.py). Started as ``LiveServer(..., command=COMMAND)``.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
from pathlib import Path

COMMAND = [sys.executable, "-c", f"import runpy; runpy.run_path({str(Path(__file__))!r}, run_name='__main__')"]
_lock = threading.Lock()


def record(runner, engine):
    path = Path(os.environ["MT_TEST_SOURCE_LOG"])
    name = engine.bundle.name

    def run_batch(options, sources):
        with _lock, path.open("a", encoding="utf-8") as out:
            for source in sources:
                out.write(json.dumps({"model": name, "ids": [int(i) for i in source.ids]}) + "\n")
        return runner(options, sources)

    return run_batch


if __name__ == "__main__":
    main = runpy.run_module("service.__main__")["main"]
    sys.exit(main(wrap_runner=record))
