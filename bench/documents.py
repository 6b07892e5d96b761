"""p99 latency of short requests while a document translates: the background priority measured side by side.

Three phases on one server, same short requests (one sentence, sequential clients): alone; while a
``--paragraphs``-paragraph .docx translates through /v1/documents (background priority); and, as the reference
for what priority saves, while the same paragraphs are sent as interactive /v1/translate requests. Prints a table
of p50/p99 and their ratios to the quiet phase, with the machine it ran on.

    python -m bench.documents --repository model_repository --paragraphs 200 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
import time
from pathlib import Path

import httpx

from bench.harness import ServerProcess, machine, percentile

SENTENCE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."


def docx_bytes(paragraphs: int) -> bytes:
    import docx

    doc = docx.Document()
    for i in range(paragraphs):
        p = doc.add_paragraph(f"Absatz {i}: Eine Frau liest ein Buch im Park. ")
        p.add_run("Zwei Kinder").bold = True
        p.add_run(" spielen am Strand mit einem Hund.")
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


async def short_requests(client: httpx.AsyncClient, stop: asyncio.Event, clients: int) -> list[float]:
    latencies: list[float] = []

    async def one_client() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            r = await client.post("/v1/translate", json={"texts": [SENTENCE], "beam_size": 4})
            if r.status_code == 200:
                latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(one_client() for _ in range(clients)))
    return latencies


async def phase(client: httpx.AsyncClient, seconds: float, clients: int, load) -> list[float]:
    stop = asyncio.Event()
    background = asyncio.ensure_future(load(stop)) if load else None
    task = asyncio.ensure_future(short_requests(client, stop, clients))
    await asyncio.sleep(seconds)
    stop.set()
    latencies = await task
    if background is not None:
        background.cancel()
    return latencies


async def run(url: str, args) -> list[tuple[str, list[float]]]:
    data = docx_bytes(args.paragraphs)
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:

        async def document(stop: asyncio.Event) -> None:
            while not stop.is_set():
                files = {"file": ("bench.docx", data)}
                job = (await client.post("/v1/documents", files=files, data={"target_language": "en"})).json()
                while not stop.is_set():
                    status = (await client.get(f"/v1/documents/{job['id']}")).json()
                    if status["status"] in ("done", "failed"):
                        break
                    await asyncio.sleep(0.2)

        async def interactive(stop: asyncio.Event) -> None:
            texts = [f"Absatz {i}: Eine Frau liest ein Buch im Park. Zwei Kinder spielen." for i in range(32)]
            while not stop.is_set():
                await client.post("/v1/translate", json={"texts": texts, "beam_size": 4, "timeout_s": 120})

        return [
            ("quiet", await phase(client, args.seconds, args.clients, None)),
            ("document job (background)", await phase(client, args.seconds, args.clients, document)),
            ("same text as requests (interactive)", await phase(client, args.seconds, args.clients, interactive)),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--paragraphs", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        server = ServerProcess(args.repository, {"MT_STATE_DIR": state}, Path(state) / "server.log").start()
        try:
            phases = asyncio.run(run(server.url, args))
        finally:
            server.stop()
    base = percentile(phases[0][1], 99) if phases[0][1] else float("nan")
    print(f"machine: {machine()}; {args.paragraphs}-paragraph .docx, {args.clients} short-request clients")
    print("| phase | requests | p50 ms | p99 ms | p99 / quiet |\n| --- | --- | --- | --- | --- |")
    for name, latencies in phases:
        p50, p99 = percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000
        print(f"| {name} | {len(latencies)} | {p50:.1f} | {p99:.1f} | {p99 / 1000 / base:.2f}x |")


if __name__ == "__main__":
    main()
