"""The real service (``python -m service``'s own main) with every model's batch runner wrapped by a fault injector.

Production code has no test hooks: this launcher passes ``wrap_runner`` to the app, and the wrapper looks at the
batch's source texts (decoded from their ids): a text containing FAIL_BATCH_MARKER makes its batch raise, one
containing SLOW_BATCH_MARKER makes its batch take SLOW_BATCH_S longer (a slower machine), one containing
CRASH_ENGINE_MARKER kills the engine: its batch raises and from then on every run of that engine's encoder and
decoder step sessions raises too (as sessions on a failed device do), until the service builds a new engine.
Started by tests as ``LiveServer(..., command=COMMAND)``; ``-c`` keeps the repository root (the server's cwd) first on
the import path.

With ``MT_TEST_STEP_DELAY_S`` in the environment every decoder step (decoder_step.onnx run) takes that much longer,
so that tests can act while continuous batching is mid-decode (a deadline, a disconnect, SIGTERM); lone sentences
then search step by step (``MT_SEARCH_LOOP`` false unless the test sets it). With
``MT_TEST_RESTART_DELAY_S`` every engine a model builds after its first (a restart) takes that much longer to start,
so that tests can watch the service while it restarts.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
from collections import Counter
from pathlib import Path

FAIL_BATCH_MARKER = "__mt_test_fail_batch__"
SLOW_BATCH_MARKER = "__mt_test_slow_batch__"
SLOW_BATCH_S = 0.05
CRASH_ENGINE_MARKER = "__mt_test_crash_engine__"

COMMAND = [sys.executable, "-c", f"import runpy; runpy.run_path({str(Path(__file__))!r}, run_name='__main__')"]


class _SlowSession:
    """An onnxruntime session whose every run takes ``delay`` seconds longer."""

    def __init__(self, session, delay: float) -> None:
        self._session, self._delay = session, delay

    def run(self, *args, **kwargs):
        time.sleep(self._delay)
        return self._session.run(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._session, name)


class _BreakableSession:
    """An onnxruntime session whose every run raises once ``broken`` is set."""

    def __init__(self, session, broken: threading.Event) -> None:
        self._session, self._broken = session, broken

    def run(self, *args, **kwargs):
        if self._broken.is_set():
            raise RuntimeError("test hook: the engine's sessions are broken")
        return self._session.run(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._session, name)


_engines_built: Counter = Counter()  # model name -> engines wrapped so far (the first one is the start-up's)


def inject_faults(runner, engine):
    name = engine.bundle.name
    restart_delay = float(os.environ.get("MT_TEST_RESTART_DELAY_S", "0"))
    if _engines_built[name] and restart_delay:
        time.sleep(restart_delay)
    _engines_built[name] += 1
    delay = float(os.environ.get("MT_TEST_STEP_DELAY_S", "0"))
    # the live decode's step session, where it is not whole-batch search's (a bundle with both step graphs)
    live_own = engine.step_decoder is not None and engine.live_step is not engine.step_decoder
    if delay and engine.step_decoder is not None:
        engine.step_decoder = _SlowSession(engine.step_decoder, delay)
        if live_own:
            engine.live_step = _SlowSession(engine.live_step, delay)
    # every kind of work starts with the encoder, and every search step runs a step graph
    broken = threading.Event()
    engine.encoder = _BreakableSession(engine.encoder, broken)
    if engine.step_decoder is not None:
        engine.step_decoder = _BreakableSession(engine.step_decoder, broken)
        if live_own:
            engine.live_step = _BreakableSession(engine.live_step, broken)

    def run_batch(options, sources):
        texts = [engine.tokenizer.decode(s.ids) for s in sources]
        if any(FAIL_BATCH_MARKER in t for t in texts):
            raise RuntimeError("test hook: injected engine failure")
        if any(CRASH_ENGINE_MARKER in t for t in texts):
            broken.set()
            raise RuntimeError("test hook: injected engine crash")
        if any(SLOW_BATCH_MARKER in t for t in texts):
            time.sleep(SLOW_BATCH_S)
        return runner(options, sources)

    return run_batch


if __name__ == "__main__":
    if float(os.environ.get("MT_TEST_STEP_DELAY_S", "0")):
        # a slowed step must be a step: the search loop graph decodes a lone sentence in one call, which would take
        # one delay instead of one per token (tests that slow steps want the decode to last)
        os.environ.setdefault("MT_SEARCH_LOOP", "false")
    main = runpy.run_module("service.__main__")["main"]
    sys.exit(main(wrap_runner=inject_faults))
