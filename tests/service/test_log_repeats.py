"""service.observability.logs.RepeatedWarnings: a warning repeated within the window is logged once, the next one after
it says
how many were dropped; errors always pass."""

from __future__ import annotations

import logging

from service.observability.logs import RepeatedWarnings


def _record(msg: str, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", level, __file__, 1, msg, (), None)


def test_repeats_within_the_window_are_dropped_and_counted():
    now = [0.0]
    f = RepeatedWarnings(window_s=10, clock=lambda: now[0])
    assert f.filter(_record("Invalid HTTP request received."))
    passed = [f.filter(_record("Invalid HTTP request received.")) for _ in range(500)]
    assert not any(passed)
    assert f.filter(_record("Unsupported upgrade request."))  # another text has its own window
    assert f.filter(_record("boom", logging.ERROR)) and f.filter(_record("boom", logging.ERROR))
    now[0] = 10.5
    record = _record("Invalid HTTP request received.")
    assert f.filter(record)
    assert record.getMessage() == "Invalid HTTP request received. (500 more like it not logged in 10 s)"
    assert f.filter(_record("Invalid HTTP request received.")) is False
