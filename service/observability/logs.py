"""Structured JSON logs: one object per line, with request id, endpoint, status, latency, batch ids."""

from __future__ import annotations

import json
import logging
import time

_EXTRA_FIELDS = (
    "request_id",
    "endpoint",
    "model",
    "status",
    "latency_ms",
    "batch_ids",
    "request_ids",
    "batch_id",
    "client",
    "api_key",  # the label of the request's API key (service/access/keys.py), never the key
    "method",
    "texts",
    "error",
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _EXTRA_FIELDS:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class RepeatedWarnings(logging.Filter):
    """At most one record per message text and ``window_s`` at WARNING or below; the next one after a window says
    how many were dropped. uvicorn warns once per malformed request ("Invalid HTTP request received."), so a client
    sending garbage could otherwise write the log as fast as it sends (every refusal is still counted in
    ``mt_connections_closed_total`` and answered 400)."""

    MAX_MESSAGES = 256  # distinct texts remembered; uvicorn's are fixed strings

    def __init__(self, window_s: float = 10.0, clock=time.monotonic) -> None:
        super().__init__()
        self.window_s, self.clock = window_s, clock
        self._seen: dict[str, tuple[float, int]] = {}  # message -> (last logged at, dropped since)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            return True
        text, now = record.getMessage(), self.clock()
        logged_at, dropped = self._seen.get(text, (None, 0))
        if logged_at is not None and now - logged_at < self.window_s:
            self._seen[text] = (logged_at, dropped + 1)
            return False
        if dropped:
            record.msg, record.args = f"{text} ({dropped} more like it not logged in {self.window_s:g} s)", ()
        if len(self._seen) >= self.MAX_MESSAGES and text not in self._seen:
            self._seen.clear()
        self._seen[text] = (now, 0)
        return True


def configure(level: str = "info") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # our access log carries the request id
    error_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, RepeatedWarnings) for f in error_log.filters):
        error_log.addFilter(RepeatedWarnings())
