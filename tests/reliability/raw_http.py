"""Raw-socket HTTP/1.1 for the connection tests: send exact bytes, read exact responses, see closes."""

from __future__ import annotations

import json
import resource
import socket
import time
from dataclasses import dataclass


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


def connect(port: int, timeout: float = 30.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def read_response(sock: socket.socket, buffer: bytearray) -> RawResponse | None:
    """The next response on ``sock`` (``buffer`` keeps bytes read past it); None when the server closed the
    connection before a response began. Raises TimeoutError when nothing complete came within the socket's timeout."""
    while b"\r\n\r\n" not in buffer:
        chunk = _recv(sock)
        if not chunk:
            if buffer:
                raise AssertionError(f"connection closed inside a response head: {bytes(buffer)[:200]!r}")
            return None
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = _recv(sock)
        if not chunk:
            raise AssertionError("connection closed inside a response body")
        rest += chunk
    buffer[:] = rest[length:]
    return RawResponse(status, headers, rest[:length])


def closed_by_server(sock: socket.socket) -> bool:
    """True when the server has closed ``sock`` (EOF or reset) within the socket's timeout; False when it is
    still open (the read timed out). Bytes that arrive first (a response) are read and dropped."""
    try:
        while _recv(sock):
            pass
    except TimeoutError:
        return False
    return True


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except ConnectionResetError:
        return b""  # a reset is a close; a timeout raises TimeoutError (socket.timeout)


def exchange(port: int, data: bytes, timeout: float = 30.0) -> tuple[RawResponse | None, bool]:
    """Send ``data`` on a new connection; returns the first response (None if the server closed without one) and
    whether the server then closed the connection (within ``timeout``)."""
    with connect(port, timeout) as sock:
        sock.sendall(data)
        response = read_response(sock, bytearray())
        return response, closed_by_server(sock)


def request(method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def raise_fd_limit(needed: int) -> int:
    """Raise this process's soft descriptor limit toward ``needed`` (up to the hard limit); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
