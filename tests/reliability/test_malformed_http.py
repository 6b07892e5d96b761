"""Requests that are not HTTP as we expect, sent as raw bytes to the real server: each gets a 4xx and a closed
connection (never a 5xx, never a hang), pipelining works, and the server keeps serving."""

from __future__ import annotations

import time

import httpx
import pytest
from raw_http import closed_by_server, connect, exchange, read_response, request
from reliability_helpers import log_entries, metric, start_server

TIMEOUT_S = 2.0  # MT_HEADER_TIMEOUT_S and MT_BODY_TIMEOUT_S of this server
JSON = {"Content-Type": "application/json"}
TRANSLATE = b'{"texts": ["der hund"], "beam_size": 1}'


@pytest.fixture(scope="module")
def server(tiny_repository, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("malformed") / "service.log"
    env = {"MT_HEADER_TIMEOUT_S": str(TIMEOUT_S), "MT_BODY_TIMEOUT_S": str(TIMEOUT_S), "MT_MAX_WAIT_MS": "5"}
    server = start_server(tiny_repository, env, log_path)
    yield server
    server.stop()


def chunked(body: bytes) -> bytes:
    return request("POST", "/v1/translate", {**JSON, "Transfer-Encoding": "chunked"}, body)


HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
CASES = {
    # framing: Content-Length and Transfer-Encoding
    "content_length_and_transfer_encoding": (
        request("POST", "/v1/translate", {**JSON, "Content-Length": "5", "Transfer-Encoding": "chunked"}, b"0\r\n\r\n"),
        400,
    ),
    "two_different_content_lengths": (
        request("POST", "/v1/translate", {**JSON, "Content-Length": "40", "content-length": "41"}, TRANSLATE),
        400,
    ),
    "content_length_negative": (request("POST", "/v1/translate", {**JSON, "Content-Length": "-1"}), 400),
    "content_length_not_a_number": (request("POST", "/v1/translate", {**JSON, "Content-Length": "4O"}), 400),
    "transfer_encoding_gzip": (request("POST", "/v1/translate", {**JSON, "Transfer-Encoding": "gzip"}), 400),
    "transfer_encoding_gzip_then_chunked": (
        request("POST", "/v1/translate", {**JSON, "Transfer-Encoding": "gzip, chunked"}, b"0\r\n\r\n"),
        400,
    ),
    # chunk sizes
    "chunk_size_not_hex": (chunked(b"zz\r\n" + TRANSLATE + b"\r\n0\r\n\r\n"), 400),
    "chunk_size_negative": (chunked(b"-28\r\n" + TRANSLATE + b"\r\n0\r\n\r\n"), 400),
    "chunk_size_overflowing": (chunked(b"f" * 40 + b"\r\n" + TRANSLATE + b"\r\n0\r\n\r\n"), 400),
    "chunk_longer_than_its_size": (chunked(b"5\r\n" + TRANSLATE + b"\r\n0\r\n\r\n"), 400),
    # header injection and malformed header lines
    "cr_inside_a_header_value": (HEAD + b"X-Note: a\rInjected: 1\r\n\r\n", 400),
    "bare_lf_inside_a_header_value": (HEAD + b"X-Note: a\nInjected: 1\r\n\r\n", 400),
    "nul_in_a_header_value": (HEAD + b"X-Note: a\x00b\r\n\r\n", 400),
    "space_before_the_colon": (HEAD + b"X-Note : a\r\n\r\n", 400),
    "header_line_without_colon": (HEAD + b"X-Note a\r\n\r\n", 400),
    "no_host_header": (b"GET /healthz HTTP/1.1\r\n\r\n", 400),
    # request line and sizes
    "space_inside_the_url": (b"GET /health z HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    "url_over_the_limit": (request("GET", "/healthz?q=" + "a" * 9000), 414),
    "url_of_100_kb": (request("GET", "/healthz?q=" + "a" * 100_000), 414),
    "too_many_header_fields": (request("GET", "/healthz", {f"X-H{i}": "1" for i in range(150)}), 431),
    "head_over_the_limit_in_one_piece": (request("GET", "/healthz", {"X-Big": "a" * 30_000}), 431),
    "not_http_at_all": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) + b"\r\n\r\n", 400),
}


@pytest.mark.parametrize("name", list(CASES))
def test_malformed_request_gets_a_4xx_and_a_closed_connection(server, name):
    data, status = CASES[name]
    response, closed = exchange(server.port, data, timeout=10 * TIMEOUT_S)
    assert response is not None, "the server closed without an answer"
    assert response.status == status, (response.status, response.body)
    assert response.headers.get("connection") == "close"
    assert response.json()["detail"]  # says what is wrong
    assert closed, "the connection stayed open after the refusal"


def test_head_over_the_limit_sent_in_pieces_gets_431(server):
    with connect(server.port, timeout=10 * TIMEOUT_S) as sock:
        sock.sendall(HEAD)
        try:
            for _ in range(40):  # 40 x 1000 bytes: past the 16 KiB limit; the server answers when it sees that
                sock.sendall(b"X-Piece: " + b"a" * 989 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed while we were still sending
        response = read_response(sock, bytearray())
        assert response is not None and response.status == 431
        assert closed_by_server(sock)


def test_body_shorter_than_announced_gets_408_after_the_body_timeout(server):
    for data in (
        request("POST", "/v1/translate", {**JSON, "Content-Length": "100"}, TRANSLATE),  # 40 of 100 bytes
        chunked(b"64\r\n" + TRANSLATE),  # a chunk of 0x64 = 100 bytes, 40 sent
    ):
        start = time.monotonic()
        response, closed = exchange(server.port, data, timeout=10 * TIMEOUT_S)
        waited = time.monotonic() - start
        assert response is not None and response.status == 408, response
        assert "MT_BODY_TIMEOUT_S" in response.json()["detail"]
        assert closed
        assert TIMEOUT_S * 0.9 <= waited < 8 * TIMEOUT_S, waited


def test_body_longer_than_content_length_is_a_second_request_refused_with_400(server):
    """The bytes after Content-Length are the next pipelined request; garbage there gets 400 and a close."""
    body = TRANSLATE + b"GARBAGE\r\n\r\n"
    with connect(server.port, timeout=10 * TIMEOUT_S) as sock:
        sock.sendall(request("POST", "/v1/translate", {**JSON, "Content-Length": str(len(TRANSLATE))}, body))
        buffer = bytearray()
        first = read_response(sock, buffer)
        assert first is not None and first.status == 200
        second = read_response(sock, buffer)
        assert second is not None and second.status == 400
        assert closed_by_server(sock)


def test_pipelined_requests_are_answered_in_order(server):
    translate = request("POST", "/v1/translate", {**JSON, "Content-Length": str(len(TRANSLATE))}, TRANSLATE)
    with connect(server.port, timeout=10 * TIMEOUT_S) as sock:
        sock.sendall(request("GET", "/healthz") + translate + request("GET", "/v1/models") + translate)
        buffer = bytearray()
        answers = [read_response(sock, buffer) for _ in range(4)]
        assert [a.status for a in answers] == [200, 200, 200, 200]
        assert answers[0].json() == {"status": "alive"}
        assert answers[1].json()["translations"][0]["text"] == answers[3].json()["translations"][0]["text"]
        assert "models" in answers[2].json()
        sock.sendall(request("GET", "/healthz", {"Connection": "close"}) + request("GET", "/healthz"))
        last = read_response(sock, buffer)
        assert last is not None and last.status == 200
        assert closed_by_server(sock), "a request after Connection: close was served"


def test_server_still_serves_and_answered_no_5xx(server):
    """Runs after the cases above (file order): the server is healthy and nothing it logged was a 5xx."""
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
    statuses = [e["status"] for e in log_entries(server.log_path) if e.get("logger") == "service.access"]
    assert statuses and all(s < 500 for s in statuses), statuses
    assert metric(server.url, "mt_connections_closed_total", reason="bad_request") >= len(CASES)
