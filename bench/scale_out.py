"""Scale-out benchmark: sentences/s through nginx-less round robin over 1, 2 and 3 replicas sharing one
redis-server, and the translation cache's effect on a workload with a share of repeated texts.

Starts redis-server (Debian's package) and the real service (``python -m service``) as N replicas on loopback
ports, all with MT_REDIS_URL; ``--clients`` concurrent clients send one-text /v1/translate requests round robin
over the replicas for ``--duration`` seconds. Each configuration is run with the cache off (MT_CACHE_MB=0) and on;
texts come from ``--source-file`` (one per line), ``--repeat`` of the requests (default 0.3) re-send a text sent
before. Prints a table of sent/s and ratios measured side by side in one run. On a 2-core machine expect no gain
from more replicas (the point is that nothing breaks); the cache ratio is the workload's repeat share at work.

    python -m bench.scale_out --repository model_repository --source-file ../shared/data/multi30k/test_2016_flickr.de
    python -m bench.scale_out --duration 5 --replicas 1 3   # a short look
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from live_server import LiveServer  # noqa: E402  (the tests' real-server helper)
from redis_server import RedisServer  # noqa: E402


def workload(texts: list[str], n: int, repeat: float, seed: int = 0) -> list[str]:
    """``n`` texts: each a repeat of an earlier one with probability ``repeat``, else the next new text."""
    rng, out, fresh = random.Random(seed), [], iter(texts * (n // max(1, len(texts)) + 1))
    for _ in range(n):
        out.append(rng.choice(out) if out and rng.random() < repeat else next(fresh))
    return out


async def drive(urls: list[str], texts: list[str], clients: int, duration: float) -> tuple[int, int]:
    """(sentences translated with 200, failures) in ``duration`` seconds."""
    done, failed, position = [0], [0], [0]
    stop = time.monotonic() + duration

    async def client(i: int) -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            while time.monotonic() < stop:
                k = position[0]
                position[0] += 1
                url = urls[k % len(urls)]
                try:
                    answer = await http.post(url + "/v1/translate", json={"texts": [texts[k % len(texts)]]})
                    ok = answer.status_code == 200
                except httpx.HTTPError:
                    ok = False
                done[0] += ok
                failed[0] += not ok

    await asyncio.gather(*(client(i) for i in range(clients)))
    return done[0], failed[0]


def run(args: argparse.Namespace) -> list[tuple[int, bool, float, int]]:
    texts = [t.strip() for t in Path(args.source_file).read_text().splitlines() if t.strip()][: args.max_texts]
    load = workload(texts, 100_000, args.repeat)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer(Path(tmp) / "redis").start()
        try:
            for n in args.replicas:
                for cache in (False, True):
                    redis.flush()
                    env = {
                        "MT_REDIS_URL": redis.url,
                        "MT_REPLICAS": str(n),
                        "MT_CACHE_MB": "64" if cache else "0",
                        "MT_MODELS": "de-en",
                    }
                    servers = []
                    try:
                        for i in range(n):
                            state = {"MT_STATE_DIR": str(Path(tmp) / f"state-{n}-{cache}-{i}")}
                            servers.append(LiveServer(args.repository, env={**env, **state}).start(timeout=120))
                        urls = [s.url for s in servers]
                        asyncio.run(drive(urls, load, args.clients, 1.0))  # warm connections and caches' misses
                        done, failed = asyncio.run(drive(urls, load, args.clients, args.duration))
                        rows.append((n, cache, done / args.duration, failed))
                        print(
                            f"replicas {n} cache {'on ' if cache else 'off'}: {done / args.duration:.1f} sent/s, "
                            f"{failed} failed",
                            flush=True,
                        )
                    finally:
                        for s in servers:
                            s.stop()
        finally:
            redis.kill()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--source-file", default=str(ROOT.parent / "shared/data/multi30k/test_2016_flickr.de"))
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--repeat", type=float, default=0.3, help="share of requests that repeat an earlier text")
    parser.add_argument("--max-texts", type=int, default=1000)
    args = parser.parse_args(argv)
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    rows = run(args)
    base = {cache: sent for n, cache, sent, _ in rows if n == args.replicas[0]}
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {args.clients} clients, "
        f"{args.duration:g} s each, {args.repeat:.0%} repeated texts"
    )
    print("| replicas | cache | sent/s | vs first, same cache | vs cache off | failed |\n|---|---|---|---|---|---|")
    off = {n: sent for n, cache, sent, _ in rows if not cache}
    for n, cache, sent, failed in rows:
        print(
            f"| {n} | {'on' if cache else 'off'} | {sent:.1f} | {sent / base[cache]:.2f}x | "
            f"{sent / off[n]:.2f}x | {failed} |"
        )
    return 0 if all(failed == 0 for *_, failed in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
