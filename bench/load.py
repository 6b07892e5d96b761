"""Load test: many concurrent clients, zero errors, and every answer equal to that request's answer alone.

A pool of distinct requests (translate with several decoding options, embed, attention; 1-3 texts each) is
first sent one at a time, so each runs in an engine batch of its own: those answers are the references.
Then ``--requests`` requests drawn from the pool are sent by ``--clients`` concurrent clients, so the
dynamic batcher merges sentences of different requests; each answer must equal its reference (texts and
tokens exactly, scores and vectors within 1e-3): an answer crossed between batch companions, a lost or
reordered sentence, or any non-200 fails the run. Prints throughput and latency percentiles and writes the
results (command, date, machine) into docs/reliability.md.

    python -m bench.load --repository model_repository --requests 20000 --clients 64
    python -m bench.load --url http://127.0.0.1:8000 --requests 2000 --clients 16 --no-write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.harness import ServerProcess, percentile
from bench.reliability_harness import RawHttpClient, publish, report_header, sentences, server_parser

TOLERANCE = 1e-3
TRANSLATE_OPTIONS = [
    {"beam_size": 1},
    {"beam_size": 2},
    {"beam_size": 4, "num_hypotheses": 2},
    {"beam_size": 2, "return_alignment": True},
]
EMBED_OPTIONS = [{"pooling": "mean", "normalize": True}, {"pooling": "max", "normalize": False}]


@dataclass
class LoadResult:
    requests: int = 0
    sentences: int = 0
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # non-200 answers and transport errors
    mismatches: list[str] = field(default_factory=list)  # 200 answers that differ from the request alone

    @property
    def ok(self) -> bool:
        return not self.errors and not self.mismatches and self.requests > 0

    def summary(self) -> dict[str, float]:
        ms = [v * 1000 for v in self.latencies_s]
        return {
            "requests": self.requests,
            "sentences": self.sentences,
            "seconds": round(self.elapsed_s, 2),
            "requests_per_s": round(self.requests / self.elapsed_s, 1) if self.elapsed_s else 0.0,
            "sentences_per_s": round(self.sentences / self.elapsed_s, 1) if self.elapsed_s else 0.0,
            "p50_ms": round(percentile(ms, 50), 1),
            "p90_ms": round(percentile(ms, 90), 1),
            "p99_ms": round(percentile(ms, 99), 1),
            "max_ms": round(max(ms), 1) if ms else float("nan"),
            "errors": len(self.errors),
            "mismatches": len(self.mismatches),
        }


def build_pool(texts: list[str], size: int, max_texts: int = 3, seed: int = 0) -> list[tuple[str, dict]]:
    """``size`` distinct (path, body) requests: 70% translate, 20% embed, 10% attention, 1..max_texts texts."""
    rng = random.Random(seed)
    pool: list[tuple[str, dict]] = []
    for i in range(size):
        roll = rng.random()
        chosen = rng.sample(texts, k=min(len(texts), rng.randint(1, max_texts)))
        if roll < 0.7:
            pool.append(("/v1/translate", {"texts": chosen, **TRANSLATE_OPTIONS[i % len(TRANSLATE_OPTIONS)]}))
        elif roll < 0.9:
            pool.append(("/v1/embed", {"texts": chosen, **EMBED_OPTIONS[i % len(EMBED_OPTIONS)]}))
        else:
            pool.append(("/v1/attention", {"source": chosen[0], "kinds": ["cross"], "aggregate": "mean"}))
    return pool


def _close(a: Any, b: Any) -> bool:
    """Nested equality: strings, ints and structure exactly, floats within TOLERANCE."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and math.isclose(a, b, abs_tol=TOLERANCE)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def compare(path: str, got: dict, expected: dict) -> str | None:
    """None when ``got`` equals the answer alone; otherwise '<kind>: <what differs>' (kind: count, text, numbers)."""
    if path == "/v1/translate":
        g, e = got.get("translations", []), expected["translations"]
        if len(g) != len(e):
            return f"count: {len(g)} translations, expected {len(e)}"
        for i, (a, b) in enumerate(zip(g, e, strict=True)):
            if a["text"] != b["text"] or a["source_tokens"] != b["source_tokens"]:
                return f"text: text {i} is {a['text']!r} (source {a['source_tokens']}), expected {b['text']!r}"
            if not _close(a, b):
                return f"numbers: text {i}: scores, hypotheses or alignment differ beyond {TOLERANCE}"
        return None
    return None if _close(got, expected) else f"numbers: differ beyond {TOLERANCE}"


async def _post(client: httpx.AsyncClient, path: str, body: dict) -> httpx.Response:
    return await client.post(path, json=body)


async def reference_answers(url: str, pool: list[tuple[str, dict]], timeout: float = 120.0) -> list[dict]:
    """Each pool request alone (one at a time): the answers every later copy must equal."""
    answers = []
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
        for path, body in pool:
            response = await _post(client, path, body)
            if response.status_code != 200:
                raise SystemExit(f"reference request failed: {path} {body} -> {response.status_code} {response.text}")
            answers.append(response.json())
    return answers


async def run_load(
    url: str,
    pool: list[tuple[str, dict]],
    references: list[dict],
    n_requests: int,
    clients: int,
    timeout: float = 120.0,
    seed: int = 1,
) -> LoadResult:
    """``n_requests`` pool requests (random order) from ``clients`` concurrent clients; checks every answer.

    The clients share a light keep-alive HTTP client (bench/reliability_harness.py), so the numbers measure
    the service rather than the client library.
    """
    rng = random.Random(seed)
    order = [rng.randrange(len(pool)) for _ in range(n_requests)]
    result = LoadResult()
    next_index = iter(range(n_requests))
    client = RawHttpClient(url, clients)
    prepared = [client.request_bytes(path, json.dumps(body).encode()) for path, body in pool]

    async def client_loop() -> None:
        for n in next_index:
            k = order[n]
            path, body = pool[k]
            started = time.perf_counter()
            try:
                status, _, content = await client.send(prepared[k], timeout)
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                at, waited = time.perf_counter() - load_started, time.perf_counter() - started
                result.errors.append(f"request {n}: {type(exc).__name__} {exc} at {at:.1f} s, after {waited:.2f} s")
                result.statuses["transport error"] = result.statuses.get("transport error", 0) + 1
                continue
            result.latencies_s.append(time.perf_counter() - started)
            result.statuses[str(status)] = result.statuses.get(str(status), 0) + 1
            result.requests += 1
            result.sentences += len(body.get("texts", [None]))
            if status != 200:
                result.errors.append(f"request {n} ({path}): {status} {content[:200]!r}")
                continue
            problem = compare(path, json.loads(content), references[k])
            if problem:
                result.mismatches.append(f"{path} {problem} (request {n}, pool {k})")

    load_started = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(clients)))
    result.elapsed_s = time.perf_counter() - load_started
    await client.close()
    return result


def report(args: argparse.Namespace, server: ServerProcess, result: LoadResult, rss: tuple) -> str:
    s = result.summary()
    lines = [
        *report_header("Load (bench/load.py)", "bench.load", args, server),
        f"- requests: {s['requests']} from {args.clients} concurrent clients, drawn from {args.pool} distinct "
        f"requests (translate 70% with beam 1/2/4, n-best, alignment; embed 20%; attention 10%; 1-{args.max_texts} "
        "texts each), every answer compared with the same request sent alone",
        "",
        "| requests | sentences | seconds | requests/s | sentences/s | p50 ms | p90 ms | p99 ms | max ms | errors "
        "| crossed or wrong answers | server RSS MiB (start / end) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {s['requests']} | {s['sentences']} | {s['seconds']} | {s['requests_per_s']} | {s['sentences_per_s']} "
        f"| {s['p50_ms']} | {s['p90_ms']} | {s['p99_ms']} | {s['max_ms']} | {s['errors']} | {s['mismatches']} "
        f"| {_mb(rss[0])} / {_mb(rss[1])} |",
        "",
        f"Statuses: {result.statuses}. Verdict: **{'pass' if result.ok else 'FAIL'}**.",
    ]
    if result.mismatches:
        kinds: dict[str, int] = {}
        for problem in result.mismatches:
            kind = problem.split(":", 1)[0]  # e.g. "/v1/translate text"
            kinds[kind] = kinds.get(kind, 0) + 1
        lines += [
            "",
            "Answers that differ from the request alone, by kind: " + ", ".join(f"{k}: {v}" for k, v in kinds.items()),
        ]
    for problem in (result.errors + result.mismatches)[:5]:
        lines.append(f"- {problem}")
    return "\n".join(lines)


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = server_parser("bench.load", __doc__)
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--pool", type=int, default=256, help="distinct requests")
    p.add_argument("--max-texts", type=int, default=3, help="texts per request, at most")
    p.add_argument("--source-file", type=Path, help="source sentences, one a line (default: toy German strings)")
    p.add_argument("--timeout", type=float, default=120.0, help="client timeout per request, seconds")
    args = p.parse_args(argv)
    if args.requests < 1 or args.clients < 1 or args.pool < 1:
        p.error("--requests, --clients and --pool must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    log_dir = Path(tempfile.mkdtemp(prefix="mt-load-"))
    server = ServerProcess(None if args.url else args.repository, env, log_dir / "service.log", url=args.url).start()
    try:
        pool = build_pool(sentences(args.source_file, max(args.pool, 8)), args.pool, args.max_texts)
        print(f"{len(pool)} distinct requests; answers alone first ...", flush=True)
        references = asyncio.run(reference_answers(server.url, pool, args.timeout))
        rss_start = server.rss_mb()
        print(f"{args.requests} requests from {args.clients} clients ...", flush=True)
        result = asyncio.run(run_load(server.url, pool, references, args.requests, args.clients, args.timeout))
        rss_end = server.rss_mb()
        if not server.alive():
            result.errors.append("the server died")
    finally:
        server.stop()
    publish(args, "bench/load.py", report(args, server, result, (rss_start, rss_end)))
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
