"""Slow and idle clients against the real server: thousands of connections that send part of a head (or nothing)
do not starve normal requests and are closed after MT_HEADER_TIMEOUT_S; MT_MAX_CONNECTIONS sheds the oldest idle
connection or refuses with 503; the server raises its descriptor limit and keeps its cap below it, so an attack
bigger than the limit does not stop it accepting (the failure seen against `make serve`: issue 19)."""

from __future__ import annotations

import re
import resource
import selectors
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest
from raw_http import closed_by_server, connect, exchange, raise_fd_limit, request, wait_until
from reliability_helpers import metric, start_server

ANSWER_WITHIN_S = 1.0  # a normal request while the slow connections are held: the best of TRIES
TRIES = 3  # the machine running the tests may be shared: one late answer of three is its noise, not starvation
ANSWER_ALWAYS_WITHIN_S = 10.0  # every try (without the limits, none is answered at all)
PARTIAL_HEAD = b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def open_slow(port: int, n: int, data: bytes | None = None) -> tuple[list[socket.socket], list[float]]:
    """``n`` connections; even ones send PARTIAL_HEAD (or ``data``), odd ones nothing (unless ``data`` is given)."""
    socks, opened = [], []
    for i in range(n):
        sock = connect(port, timeout=30)
        payload = data if data is not None else (PARTIAL_HEAD if i % 2 == 0 else b"")
        if payload:
            sock.sendall(payload)
        socks.append(sock)
        opened.append(time.monotonic())
    return socks, opened


def wait_closed(socks: list[socket.socket], timeout: float) -> dict[int, tuple[float, bytes]]:
    """Index -> (time the server closed it, bytes it sent first), for those closed within ``timeout``."""
    sel = selectors.DefaultSelector()
    for i, sock in enumerate(socks):
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, i)
    received: dict[int, bytes] = {}
    closed: dict[int, tuple[float, bytes]] = {}
    deadline = time.monotonic() + timeout
    while len(closed) < len(socks) and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            i = key.data
            try:
                chunk = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                chunk = b""
            if chunk:
                received[i] = received.get(i, b"") + chunk
            else:
                closed[i] = (time.monotonic(), received.get(i, b""))
                sel.unregister(key.fileobj)
    sel.close()
    return closed


def answered_quickly(port: int) -> list[tuple[str, int, float]]:
    """GET /healthz and POST /v1/translate, each on a new connection: (path, status, seconds)."""
    body = b'{"texts": ["der hund"], "beam_size": 1}'
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), "Connection": "close"}
    translate = request("POST", "/v1/translate", headers, body)
    out = []
    for path, data in (("/healthz", request("GET", "/healthz", {"Connection": "close"})), ("/v1/translate", translate)):
        start = time.monotonic()
        response, _ = exchange(port, data, timeout=30)
        out.append((path, response.status if response else 0, time.monotonic() - start))
    return out


def assert_answered_quickly(port: int) -> list[tuple[str, int, float]]:
    """TRIES rounds of answered_quickly: every answer 200 within ANSWER_ALWAYS_WITHIN_S, and for each path the
    fastest within ANSWER_WITHIN_S. Returns every answer."""
    answers = [a for _ in range(TRIES) for a in answered_quickly(port)]
    assert all(status == 200 and seconds < ANSWER_ALWAYS_WITHIN_S for _, status, seconds in answers), answers
    for path in ("/healthz", "/v1/translate"):
        assert min(seconds for p, _, seconds in answers if p == path) < ANSWER_WITHIN_S, answers
    return answers


def server_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


@pytest.fixture(scope="module")
def slow_server(tiny_repository, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("slow") / "service.log"
    env = {"MT_HEADER_TIMEOUT_S": "8", "MT_BODY_TIMEOUT_S": "3", "MT_MAX_WAIT_MS": "5"}
    server = start_server(tiny_repository, env, log_path)
    answered_quickly(server.port)  # the first translation initialises what readiness did not (language detection)
    yield server
    server.stop()


def test_thousands_of_slow_connections_do_not_starve_requests_and_are_closed_after_the_header_timeout(slow_server):
    n = min(2000, raise_fd_limit(2400) - 300)
    if n < 500:
        pytest.skip(f"this process may open too few descriptors ({n + 300})")
    timeout_s = 8.0
    before = metric(slow_server.url, "mt_connections_closed_total", reason="header_timeout")
    socks, opened = open_slow(slow_server.port, n)
    try:
        pid = slow_server.process.pid
        assert wait_until(lambda: server_fds(pid) >= n, timeout=5), f"the server holds {server_fds(pid)} descriptors"
        held_at = time.monotonic()
        answers = assert_answered_quickly(slow_server.port)
        print(f"opened {n} in {opened[-1] - opened[0]:.1f} s, held after {held_at - opened[0]:.1f} s; {answers}")
        assert time.monotonic() - opened[0] < timeout_s, "too slow to open: the answers came after the timeout"

        closed = wait_closed(socks, timeout=timeout_s + 60)
        assert len(closed) == n, f"{n - len(closed)} of {n} slow connections still open"
        for i, (at, first) in closed.items():
            assert at - opened[i] >= timeout_s * 0.9, f"connection {i} closed after {at - opened[i]:.1f} s"
            if i % 2 == 0:  # sent part of a head: told why
                assert first.startswith(b"HTTP/1.1 408 ") and b"MT_HEADER_TIMEOUT_S" in first, first[:200]
            else:  # sent nothing: closed silently
                assert first == b""
        assert metric(slow_server.url, "mt_connections_closed_total", reason="header_timeout") - before >= n
    finally:
        close_all(socks)


def test_a_head_sent_one_byte_at_a_time_is_closed_at_the_header_timeout(slow_server):
    """The timeout bounds the whole head, not the pause between bytes (slowloris)."""
    socks, opened = open_slow(slow_server.port, 3, data=PARTIAL_HEAD)
    try:
        deadline = opened[0] + 8.0 + 30
        open_socks = list(socks)
        while open_socks and time.monotonic() < deadline:
            for sock in list(open_socks):
                try:
                    sock.sendall(b"a")
                except OSError:
                    open_socks.remove(sock)
            time.sleep(0.5)
        assert not open_socks, "a trickled head was never refused"
        for sock in socks:
            sock.settimeout(5)
            data = sock.recv(65536)
            assert data.startswith(b"HTTP/1.1 408 "), data[:200]
        assert time.monotonic() - opened[0] >= 8.0 * 0.9
    finally:
        close_all(socks)


def test_a_body_that_stops_coming_gets_408_after_the_body_timeout(slow_server):
    data = request("POST", "/v1/translate", {"Content-Type": "application/json", "Content-Length": "200"}, b'{"te')
    start = time.monotonic()
    response, closed = exchange(slow_server.port, data, timeout=60)
    assert response is not None and response.status == 408, response
    assert "MT_BODY_TIMEOUT_S" in response.json()["detail"]
    assert closed
    assert 3.0 * 0.9 <= time.monotonic() - start < 30
    assert httpx.get(slow_server.url + "/healthz", timeout=10).status_code == 200


@pytest.fixture(scope="module")
def capped_server(tiny_repository, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("capped") / "service.log"
    env = {"MT_MAX_CONNECTIONS": "100", "MT_HEADER_TIMEOUT_S": "120", "MT_BODY_TIMEOUT_S": "120"}
    server = start_server(tiny_repository, env, log_path)
    answered_quickly(server.port)  # the first translation: see slow_server
    yield server
    server.stop()


def test_beyond_max_connections_the_oldest_idle_connection_is_shed(capped_server):
    raise_fd_limit(1000)
    socks, _ = open_slow(capped_server.port, 300, data=PARTIAL_HEAD)
    try:
        for sock in socks[:190]:  # the oldest made room for the newer ones
            sock.settimeout(10)
            assert closed_by_server(sock)
        for sock in socks[-90:]:  # the newest are still held
            sock.settimeout(0.2)
            assert not closed_by_server(sock)
        assert_answered_quickly(capped_server.port)  # a new client sheds the oldest idle connection, too
        assert metric(capped_server.url, "mt_connections_closed_total", reason="shed_idle") >= 200
    finally:
        close_all(socks)


def test_when_every_connection_is_busy_a_new_one_gets_503_with_retry_after(capped_server):
    raise_fd_limit(1000)
    waiting_body = request("POST", "/v1/translate", {"Content-Type": "application/json", "Content-Length": "200"})
    socks, _ = open_slow(capped_server.port, 100, data=waiting_body + b'{"te')  # each a request being served
    try:
        time.sleep(0.5)  # let the server read the heads
        response, closed = exchange(capped_server.port, request("GET", "/healthz"), timeout=30)
        assert response is not None and response.status == 503
        assert response.headers["retry-after"] == "1"
        assert "too many open connections" in response.json()["detail"]
        assert closed
    finally:
        close_all(socks)
    assert wait_until(lambda: _healthz(capped_server.url) == 200, timeout=30)
    assert metric(capped_server.url, "mt_connections_closed_total", reason="refused_full") >= 1


def _healthz(url: str) -> int | None:
    try:
        return httpx.get(url + "/healthz", timeout=5).status_code
    except httpx.HTTPError:
        return None


FD_LIMITED = (
    "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (700, 1000)); "
    "sys.argv = ['service']; runpy.run_module('service', run_name='__main__', alter_sys=True)"
)


def test_more_slow_connections_than_descriptors_do_not_stop_the_server_accepting(tiny_repository, tmp_path):
    """The issue's attack in small: the server may open 1000 descriptors (soft limit 700, raised to the hard
    1000 at start), MT_MAX_CONNECTIONS is left at its default (4096) and 1500 connections send part of a head."""
    if raise_fd_limit(2000) < 1900:
        pytest.skip("this process may open too few descriptors")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1000:
        pytest.skip("the hard descriptor limit is under 1000")
    log_path = tmp_path / "service.log"
    server = start_server(
        tiny_repository, {"MT_HEADER_TIMEOUT_S": "120"}, log_path, command=[sys.executable, "-c", FD_LIMITED]
    )
    socks: list[socket.socket] = []
    try:
        limits = Path(f"/proc/{server.process.pid}/limits").read_text()
        assert re.search(r"^Max open files\s+1000\s+1000\s", limits, re.MULTILINE), limits
        assert "MT_MAX_CONNECTIONS 4096 lowered to 560, listen backlog 46" in log_path.read_text()
        answered_quickly(server.port)  # the first translation: see slow_server
        socks, _ = open_slow(server.port, 1500, data=PARTIAL_HEAD)
        assert server_fds(server.process.pid) < 1000
        assert "out of system resource" not in log_path.read_text()  # accept() never failed
        assert_answered_quickly(server.port)
    finally:
        close_all(socks)
        server.stop()
