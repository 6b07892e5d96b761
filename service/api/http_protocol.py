"""The HTTP/1.1 connection layer under uvicorn: h11, with the limits uvicorn lacks.

uvicorn (0.54) arms no timer before a request head is complete (its keep-alive timer starts only after a
response), caps neither open connections nor the size of a head that arrives in one piece, and lets h11 accept
requests that a proxy in front may read differently. ``guarded_protocol`` builds a subclass of uvicorn's
``H11Protocol`` that adds, per connection:

- a header-read timeout: the head must be complete within ``header_timeout_s`` of the connection opening or of
  its first byte on a kept-alive connection (408 if part of it came, else a silent close);
- a body-read timeout: the body must be complete within ``body_timeout_s`` of the head (408, close);
- a cap on open connections: beyond ``max_connections`` the oldest idle connection (no request being served:
  waiting for a head, or kept alive between requests) is closed to make room, and when none is idle the new
  one gets 503 with Retry-After and is closed;
- head checks before the application sees the request: head size (431), header count (431), URL length (414),
  bare LF line ends (400), Content-Length with Transfer-Encoding (400), a transfer coding other than chunked
  (400; h11 says 501, but nothing a client sends may get a 5xx here).

h11 itself refuses the rest (malformed request lines, header lines with CR, NUL or no colon, bad Content-Length,
bad chunk sizes) with 400. Every refusal here is JSON ``{"detail": ...}`` with ``Connection: close``.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_HEAD_END = re.compile(rb"\n\r?\n")  # the blank line that ends a head (h11's own rule)
_BARE_LF = re.compile(rb"(?<!\r)\n")
_ECHOED_BYTES = re.compile(r":?\s*(bytearray\(|b['\"]).*$", re.DOTALL)
_REQUEST_LINE_EXTRA = 32  # method, spaces and "HTTP/1.1" around the URL


@dataclass(frozen=True)
class HttpLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 4096
    max_header_bytes: int = 16384
    max_headers: int = 100
    max_url_bytes: int = 8192


class HeadRefused(h11.RemoteProtocolError):
    """A request refused by our checks; ``error_status_hint`` is its status."""


def _refuse(detail: str, status: int) -> HeadRefused:
    return HeadRefused(detail, error_status_hint=status)


class GuardedConnection(h11.Connection):
    """h11's server connection with the head checks; remembers the error it raised for the response."""

    def __init__(self, limits: HttpLimits) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        self.limits = limits
        self.error: h11.RemoteProtocolError | None = None
        self._scanned = 0  # bytes of the pending head already checked

    def next_event(self):
        if self.error is not None:
            raise self.error
        try:
            if self.their_state is h11.IDLE:
                self._check_pending_head()
            event = super().next_event()
            if isinstance(event, h11.Request):
                self._scanned = 0
                self._check_request(event)
            return event
        except h11.RemoteProtocolError as exc:
            self.error = exc
            raise

    def _check_pending_head(self) -> None:
        data = self._receive_buffer._data  # h11's bytearray of received, unparsed bytes (read, never changed)
        limits = self.limits
        start = max(0, self._scanned - 2)
        end_match = _HEAD_END.search(data, start)
        end = end_match.end() if end_match else len(data)
        first_line = data.find(b"\n", 0, end)
        if (first_line if first_line >= 0 else end) > limits.max_url_bytes + _REQUEST_LINE_EXTRA:
            raise _refuse(f"URL over {limits.max_url_bytes} bytes (MT_MAX_URL_BYTES)", 414)
        if end > limits.max_header_bytes:
            raise _refuse(f"request head over {limits.max_header_bytes} bytes (MT_MAX_HEADER_BYTES)", 431)
        if _BARE_LF.search(data, start, end):
            raise _refuse("a line of the request head ends in LF without CR; HTTP/1.1 lines end with CRLF", 400)
        if end_match is None:
            self._scanned = len(data)

    def _check_request(self, event: h11.Request) -> None:
        limits = self.limits
        if len(event.target) > limits.max_url_bytes:
            raise _refuse(f"URL over {limits.max_url_bytes} bytes (MT_MAX_URL_BYTES)", 414)
        if len(event.headers) > limits.max_headers:
            raise _refuse(f"more than {limits.max_headers} header fields (MT_MAX_HEADERS)", 431)
        names = {name for name, _ in event.headers}
        if b"content-length" in names and b"transfer-encoding" in names:
            raise _refuse("both Content-Length and Transfer-Encoding: send one of them", 400)


def _status_and_detail(exc: h11.RemoteProtocolError | None) -> tuple[int, str]:
    if isinstance(exc, HeadRefused):
        return exc.error_status_hint, str(exc)
    if exc is None:
        return 400, "malformed HTTP request"
    reason = _ECHOED_BYTES.sub("", str(exc))  # h11's message without the bytes it quotes
    if exc.error_status_hint == 431:
        return 431, "request head too large (MT_MAX_HEADER_BYTES)"
    return 400, f"malformed HTTP request: {reason}"


def error_response(status: int, detail: str, extra_headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A complete HTTP/1.1 response with a JSON ``{"detail": ...}`` body and ``Connection: close``."""
    reasons = {
        400: "Bad Request",
        408: "Request Timeout",
        414: "URI Too Long",
        431: "Request Header Fields Too Large",
        503: "Service Unavailable",
    }
    body = json.dumps({"detail": detail}).encode()
    head = [
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{k}: {v}" for k, v in extra_headers),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class IdleConnections:
    """Connections serving no request, oldest first (opened or last answered earliest), and those being closed
    (closed by us, their descriptor not yet released: the event loop does that a tick later)."""

    def __init__(self) -> None:
        self._order: OrderedDict[GuardedH11Protocol, None] = OrderedDict()
        self.closing: set[GuardedH11Protocol] = set()

    def idle(self, conn: GuardedH11Protocol) -> None:
        self._order.pop(conn, None)
        self._order[conn] = None

    def busy(self, conn: GuardedH11Protocol) -> None:
        self._order.pop(conn, None)

    def oldest(self, other_than: GuardedH11Protocol) -> GuardedH11Protocol | None:
        return next((c for c in self._order if c is not other_than), None)


class CoalescingTransport:
    """A transport whose writes made in one event-loop turn leave in one send: a response's head and body (written
    one after the other by uvicorn) reach the peer together, so a process killed between the two never leaves a
    proxy with a head whose body never comes (it could not retry the request on another replica then)."""

    def __init__(self, transport, loop) -> None:
        self._transport, self._loop = transport, loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def _flush(self) -> None:
        if self._pending and not self._transport.is_closing():
            self._transport.write(b"".join(self._pending))
        self._pending.clear()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(c) for c in self._pending)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class GuardedH11Protocol(H11Protocol):
    limits: HttpLimits
    idle_connections: IdleConnections
    on_close: Callable[[str], None]  # reason: header_timeout, body_timeout, shed_idle, refused_full, bad_request

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.conn = GuardedConnection(self.limits)
        self._header_timer = None
        self._body_timer = None
        self._head_bytes = False  # bytes of the pending head received

    def connection_made(self, transport) -> None:
        super().connection_made(CoalescingTransport(transport, self.loop))
        if len(self.connections) - len(self.idle_connections.closing) > self.limits.max_connections:
            victim = self.idle_connections.oldest(other_than=self)
            if victim is None:
                self._close(503, "too many open connections; retry shortly", "refused_full", (("retry-after", "1"),))
                return
            victim._close(None, "", "shed_idle")
        self.idle_connections.idle(self)
        self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._header_timeout)

    def connection_lost(self, exc) -> None:
        self._cancel_timers()
        self.idle_connections.busy(self)
        self.idle_connections.closing.discard(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._head_bytes = True
            if self._header_timer is None:  # the next head on a kept-alive connection begins
                self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._header_timeout)
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is not h11.IDLE:  # the head is complete: a request is being served
            self._head_bytes = False
            self.idle_connections.busy(self)
            self._cancel("_header_timer")
            if state is h11.SEND_BODY and self._body_timer is None:
                self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_timeout)
        if state is not h11.SEND_BODY:
            self._cancel("_body_timer")

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        self.idle_connections.idle(self)
        if self.conn.trailing_data[0]:  # part of the next head came with this request: its timer starts now
            self._head_bytes = True
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._header_timeout)
        else:  # nothing of the next head yet: the keep-alive timer (MT_KEEP_ALIVE_S) governs
            self._head_bytes = False
            self._cancel("_header_timer")

    def send_400_response(self, msg: str) -> None:  # uvicorn calls it when h11 (or our checks) refuse a request
        status, detail = _status_and_detail(self.conn.error)
        self._close(status, detail, "bad_request")

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._head_bytes:
            self._close(
                408,
                f"request head not complete within {self.limits.header_timeout_s:g} s (MT_HEADER_TIMEOUT_S)",
                "header_timeout",
            )
        else:
            self._close(None, "", "header_timeout")

    def _body_timeout(self) -> None:
        self._body_timer = None
        self._close(
            408,
            f"request body not complete within {self.limits.body_timeout_s:g} s (MT_BODY_TIMEOUT_S)",
            "body_timeout",
        )

    def _close(self, status: int | None, detail: str, reason: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        """Answer ``status`` (unless None, or a response has begun) and close the connection."""
        self._cancel_timers()
        if self.transport.is_closing():
            return
        answering = self.cycle is not None and self.cycle.response_started and not self.cycle.response_complete
        if status is not None and not answering:
            self.transport.write(error_response(status, detail, headers))
        self.transport.close()
        self.idle_connections.busy(self)  # never shed twice
        self.idle_connections.closing.add(self)
        self.on_close(reason)

    def _cancel(self, name: str) -> None:
        timer = getattr(self, name)
        if timer is not None:
            timer.cancel()
            setattr(self, name, None)

    def _cancel_timers(self) -> None:
        self._cancel("_header_timer")
        self._cancel("_body_timer")


def guarded_protocol(limits: HttpLimits, on_close: Callable[[str], None] = lambda reason: None) -> type:
    """A GuardedH11Protocol class for one server (uvicorn.Config(http=...)): its limits and its idle list."""
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"limits": limits, "idle_connections": IdleConnections(), "on_close": staticmethod(on_close)},
    )
