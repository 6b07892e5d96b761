"""The mixed request load of bench/soak.py: what each kind of request sends and which answer it expects.

Kinds: translate (greedy, beam 4), embed, attention, streaming translate (Server-Sent Events), bad inputs (each
expects its own 4xx), and clients that leave mid-request (mid-body, or after sending the whole body) or
mid-stream (after the first event). A translation must also equal the first answer the soak got for the same
request (same texts and beam, streamed or not): an answer that drifts over the hour is an error too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass

import httpx
from httpx_sse import aconnect_sse

CLOSED = "closed"  # the client left before an answer, on purpose

# kind -> share of the requests
KINDS = {
    "translate greedy": 0.22,
    "translate beam": 0.18,
    "embed": 0.14,
    "attention": 0.10,
    "stream": 0.12,
    "bad input": 0.12,
    "disconnect mid-request": 0.06,
    "disconnect mid-stream": 0.06,
}
SERVED_KINDS = ("translate greedy", "translate beam", "embed", "attention", "stream", "bad input")


@dataclass(frozen=True)
class BadInput:
    name: str
    method: str
    path: str
    body: bytes | None
    status: int  # the answer it must get


def _json(value) -> bytes:
    return json.dumps(value).encode()


# Expected statuses hold for the service's default limits (bench/soak.py starts it with them).
BAD_INPUTS = (
    BadInput("no texts", "POST", "/v1/translate", _json({"texts": []}), 422),
    BadInput("texts not a list", "POST", "/v1/translate", _json({"texts": "der hund"}), 422),
    BadInput("beam_size 0", "POST", "/v1/translate", _json({"texts": ["der hund"], "beam_size": 0}), 422),
    BadInput(
        "num_hypotheses above beam_size",
        "POST",
        "/v1/translate",
        _json({"texts": ["der hund"], "beam_size": 2, "num_hypotheses": 3}),
        422,
    ),
    BadInput("65 texts", "POST", "/v1/translate", _json({"texts": ["der hund"] * 65}), 422),
    BadInput("text over 2000 characters", "POST", "/v1/translate", _json({"texts": ["hund " * 500]}), 422),
    BadInput("cut-off JSON", "POST", "/v1/translate", b'{"texts": ["der hund"', 422),
    BadInput("unknown model", "POST", "/v1/translate", _json({"texts": ["der hund"], "model": "xx-yy"}), 404),
    BadInput(
        "streamed, unknown model",
        "POST",
        "/v1/translate",
        _json({"texts": ["a"], "model": "xx-yy", "stream": True}),
        404,
    ),
    BadInput("embed pooling 'median'", "POST", "/v1/embed", _json({"texts": ["der hund"], "pooling": "median"}), 422),
    BadInput("attention layer 99", "POST", "/v1/attention", _json({"source": "der hund", "layers": [99]}), 422),
    BadInput("GET on a POST endpoint", "GET", "/v1/translate", None, 405),
    BadInput("unknown path", "POST", "/v1/nothing", _json({}), 404),
)


@dataclass(frozen=True)
class Outcome:
    at_s: float  # when it ended, seconds since the soak began
    kind: str
    status: str  # HTTP status, CLOSED, or the transport error's name
    latency_s: float
    problem: str | None = None  # None: the expected answer


class Mix:
    """Chooses requests (seeded) and checks their answers; one per soak, shared by its clients."""

    def __init__(self, texts: list[str], started: float, seed: int = 0, pool: int = 64) -> None:
        self.rng = random.Random(seed)
        self.started = started
        self.pool = [self.rng.sample(texts, k=self.rng.randint(1, min(3, len(texts)))) for _ in range(pool)]
        self.first: dict[tuple[int, int], list[str]] = {}  # (pool index, beam) -> the first translations seen

    def choose(self) -> str:
        return self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]

    async def run(self, kind: str, client: httpx.AsyncClient) -> Outcome:
        begun = time.perf_counter()
        try:
            status, problem = await self._send(kind, client)
        except (httpx.HTTPError, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            status, problem = type(exc).__name__, f"{type(exc).__name__}: {exc}"
        ended = time.perf_counter()
        return Outcome(round(ended - self.started, 3), kind, status, ended - begun, problem)

    async def _send(self, kind: str, client: httpx.AsyncClient) -> tuple[str, str | None]:
        i = self.rng.randrange(len(self.pool))
        texts = self.pool[i]
        if kind in ("translate greedy", "translate beam"):
            beam = 1 if kind == "translate greedy" else 4
            r = await client.post("/v1/translate", json={"texts": texts, "beam_size": beam})
            if r.status_code != 200:
                return str(r.status_code), f"{r.status_code}: {r.text[:200]}"
            return "200", self._same_as_first(i, beam, [t["text"] for t in r.json()["translations"]])
        if kind == "embed":
            r = await client.post("/v1/embed", json={"texts": texts, "pooling": self.rng.choice(["mean", "max"])})
            if r.status_code != 200:
                return str(r.status_code), f"{r.status_code}: {r.text[:200]}"
            got = len(r.json()["embeddings"])
            return "200", None if got == len(texts) else f"{got} embeddings for {len(texts)} texts"
        if kind == "attention":
            r = await client.post("/v1/attention", json={"source": texts[0], "kinds": ["encoder", "cross"]})
            if r.status_code != 200:
                return str(r.status_code), f"{r.status_code}: {r.text[:200]}"
            answer = r.json()
            return "200", None if answer.get("encoder") and answer.get("cross") else "maps missing"
        if kind == "stream":
            return await self._stream(client, i, self.rng.choice([1, 4]))
        if kind == "bad input":
            return await self._bad_input(client, self.rng.choice(BAD_INPUTS))
        if kind == "disconnect mid-request":
            return await self._leave_mid_request(client, texts)
        if kind == "disconnect mid-stream":
            return await self._leave_mid_stream(client, texts)
        raise ValueError(f"unknown kind {kind!r}")

    def _same_as_first(self, i: int, beam: int, translations: list[str]) -> str | None:
        first = self.first.setdefault((i, beam), translations)
        return None if translations == first else f"translation changed: {translations} (first: {first})"

    async def _stream(self, client: httpx.AsyncClient, i: int, beam: int) -> tuple[str, str | None]:
        texts = self.pool[i]
        body = {"texts": texts, "beam_size": beam, "stream": True}
        async with aconnect_sse(client, "POST", "/v1/translate", json=body) as source:
            r = source.response
            if r.status_code != 200:
                await r.aread()
                return str(r.status_code), f"{r.status_code}: {r.text[:200]}"
            events = [(e.event, e.json()) async for e in source.aiter_sse()]
        names = [name for name, _ in events]
        if "error" in names or not names or names[-1] != "done":
            return "200", f"stream events {names[-3:]}: {events[-1][1] if events else 'none'}"
        final = {data["index"]: data["translation"]["text"] for name, data in events if name == "translation"}
        if sorted(final) != list(range(len(texts))):
            return "200", f"translations of texts {sorted(final)}, expected {len(texts)}"
        return "200", self._same_as_first(i, beam, [final[k] for k in range(len(texts))])

    async def _bad_input(self, client: httpx.AsyncClient, bad: BadInput) -> tuple[str, str | None]:
        headers = {"content-type": "application/json"} if bad.body is not None else {}
        r = await client.request(bad.method, bad.path, content=bad.body, headers=headers)
        if r.status_code != bad.status:
            return str(r.status_code), f"{bad.name}: {r.status_code}, expected {bad.status}: {r.text[:200]}"
        return str(r.status_code), None

    async def _leave_mid_request(self, client: httpx.AsyncClient, texts: list[str]) -> tuple[str, str | None]:
        """A raw connection that sends half the body, or all of it and waits up to 50 ms, then closes."""
        body = _json({"texts": texts, "beam_size": 4})
        head = (
            f"POST /v1/translate HTTP/1.1\r\nHost: {client.base_url.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        reader, writer = await asyncio.open_connection(client.base_url.host, client.base_url.port)
        try:
            if self.rng.random() < 0.5:
                writer.write(head + body[: len(body) // 2])
                await writer.drain()
                return CLOSED, None
            writer.write(head + body)
            await writer.drain()
            try:
                line = await asyncio.wait_for(reader.readline(), self.rng.uniform(0.0, 0.05))
            except TimeoutError:
                return CLOSED, None
            status = line.split()[1].decode() if len(line.split()) > 1 else "no status line"
            return status, None if status == "200" else f"answered {line[:80]!r} before the client left"
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _leave_mid_stream(self, client: httpx.AsyncClient, texts: list[str]) -> tuple[str, str | None]:
        """A stream read up to its first event, then closed."""
        body = {"texts": texts, "beam_size": 4, "stream": True}
        async with client.stream("POST", "/v1/translate", json=body) as r:
            if r.status_code != 200 or not r.headers.get("content-type", "").startswith("text/event-stream"):
                await r.aread()
                return str(r.status_code), f"{r.status_code} {r.headers.get('content-type')}: {r.text[:200]}"
            async for line in r.aiter_lines():
                if line.startswith("event:"):
                    break
        return "200", None
