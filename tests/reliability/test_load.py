"""Load, CI-sized (bench/load.py runs the full 20,000 x 64): concurrent requests with mixed options are batched
together, and every answer equals that request's answer computed alone: no errors, no crossed answers."""

from __future__ import annotations

import asyncio
import copy
import re
import socket
import time

from reliability_helpers import metric

from bench import load
from bench import reliability_harness as harness

REQUESTS, CLIENTS, POOL = 300, 16, 48


def test_concurrent_answers_equal_the_answers_alone(strict_server):
    url = strict_server.url
    pool = load.build_pool(harness.sentences(None, 64, seed=5), POOL, max_texts=3, seed=5)
    assert {path for path, _ in pool} == {"/v1/translate", "/v1/embed", "/v1/attention"}
    references = asyncio.run(load.reference_answers(url, pool))
    batches = metric(url, "mt_batch_size_count", model="de-en"), metric(url, "mt_batch_size_sum", model="de-en")

    result = asyncio.run(load.run_load(url, pool, references, REQUESTS, CLIENTS))

    assert result.errors == [], result.errors[:5]
    assert result.mismatches == [], result.mismatches[:5]
    assert result.requests == REQUESTS and result.statuses == {"200": REQUESTS}
    count = metric(url, "mt_batch_size_count", model="de-en") - batches[0]
    sentences = metric(url, "mt_batch_size_sum", model="de-en") - batches[1]
    assert sentences >= result.sentences  # (attention requests run as batches of one sentence)
    assert sentences / count > 1.2, "the load did not make the batcher merge requests: the test proves nothing"


def test_the_comparison_catches_a_crossed_answer():
    answer = {
        "model": "de-en",
        "translations": [
            {"text": "the dog", "score": -0.5, "source_tokens": ["▁der", "▁hund", "</s>"], "target_tokens": ["▁the"]},
            {"text": "a cat", "score": -0.7, "source_tokens": ["▁eine", "▁katze", "</s>"], "target_tokens": ["▁a"]},
        ],
    }
    assert load.compare("/v1/translate", copy.deepcopy(answer), answer) is None
    crossed = copy.deepcopy(answer)
    crossed["translations"].reverse()
    assert "expected 'the dog'" in load.compare("/v1/translate", crossed, answer)
    rescored = copy.deepcopy(answer)
    rescored["translations"][1]["score"] = -0.9
    assert load.compare("/v1/translate", rescored, answer) is not None
    close = copy.deepcopy(answer)
    close["translations"][1]["score"] = -0.7 + 1e-6  # float noise of a different batch shape is not a crossing
    assert load.compare("/v1/translate", close, answer) is None
    vectors = {"model": "de-en", "dimension": 2, "embeddings": [[0.6, 0.8], [1.0, 0.0]]}
    swapped = {**vectors, "embeddings": vectors["embeddings"][::-1]}
    assert load.compare("/v1/embed", swapped, vectors) is not None


def _raw_request(sock: socket.socket, body: bytes) -> bytes:
    sock.sendall(
        b"POST /v1/embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"content-length: (\d+)", head.lower()).group(1))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        rest += chunk
    return head


def test_keep_alive_outlasts_the_clients_pool_expiry(strict_server):
    """httpx keeps idle connections 5 s: the server must not close them first, or a request sent on a connection
    the server is closing fails (the ReadErrors bench/load.py met at 64 clients before MT_KEEP_ALIVE_S)."""
    port = int(strict_server.url.rsplit(":", 1)[1])
    body = b'{"texts": ["der hund"]}'
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        assert _raw_request(sock, body).startswith(b"HTTP/1.1 200")
        time.sleep(5.5)
        assert _raw_request(sock, body).startswith(b"HTTP/1.1 200")  # same connection, still open


def test_int8_answers_do_not_depend_on_batch_companions(tiny_bundle_dir):
    """Static int8 (scales fixed at export): a sentence's answer is the same alone and in a batch of 32 of mixed
    lengths. Dynamic quantization (scale of the whole batch tensor) failed this; it was a strict xfail then."""
    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions

    engine = Engine(load_bundle(tiny_bundle_dir), "int8", "cpu")
    texts = harness.sentences(None, 32, seed=5)
    options = TranslateOptions(beam_size=2)
    alone = [engine.translate([t], options)[0] for t in texts]
    batched = engine.translate(texts, options)
    assert [a.text for a in alone] == [b.text for b in batched]
    assert max(abs(a.score - b.score) for a, b in zip(alone, batched, strict=True)) < 1e-3
