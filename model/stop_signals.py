"""Stop a training run cleanly on Ctrl-C or SIGTERM: finish the step, write ``last.pt``, exit; the same command
resumes. A second Ctrl-C stops at once, as Python's default does."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingStopped(Exception):
    """Training ended early on a stop signal, after ``last.pt`` was written."""

    def __init__(self, signum: int, step: int) -> None:
        self.signum, self.step = signum, step
        super().__init__(f"{signal.Signals(signum).name}: stopped after step {step}, last.pt written")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process the signal ended


class StopRequest:
    """The signal asked for, or None: the training loop reads it between steps."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: now
        self.signum = signum
        print(
            f"{signal.Signals(signum).name}: stopping after this step and writing last.pt"
            + (" (Ctrl-C again: stop now)" if signum == signal.SIGINT else ""),
            file=sys.stderr,
            flush=True,
        )


@contextlib.contextmanager
def stop_on_signals(enabled: bool = True) -> Iterator[StopRequest]:
    """Handle SIGINT and SIGTERM with a StopRequest while the block runs, then put the old handlers back.

    Only in the main thread (the only one Python delivers signals to) and where ``enabled``: a multi-process run
    keeps the default, since one rank leaving alone would leave the others waiting in a collective."""
    request = StopRequest()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {s: signal.signal(s, request._handle) for s in SIGNALS}
    try:
        yield request
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
