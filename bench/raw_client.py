"""A load generator's HTTP/1.1 client with almost no CPU of its own, for benchmarks on small machines.

On the 2-core VMs the benchmarks run on, 64 httpx clients in the benchmark's process take much of a core, and that
core is the server's: at 64 clients bench/serving.py's httpx rounds measured the load generator as much as the
server (docs/engine-speed-log.md item 51). ``RawConnection`` is one keep-alive connection that writes a prepared
request and reads a response whose length is given by Content-Length (all the service's JSON answers): no
connection pool, no header objects, no async framework beyond asyncio's streams. It is not a general client:
chunked or streamed responses are refused (ValueError), and a ``Connection: close`` answer closes the connection
(the next request opens another).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from urllib.parse import urlsplit

_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_CLOSE = re.compile(rb"\r\nconnection:[ \t]*close", re.IGNORECASE)


class RawConnection:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"{url}: an http:// URL with a host")
        self.host, self.port = parts.hostname, parts.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.head = b""  # the last response's status line and headers (e.g. a 503's Retry-After)

    async def post_json(self, path: str, payload: object) -> tuple[int, bytes]:
        """(status, body) of POST ``path`` with ``payload`` as JSON, on this connection (opened when needed)."""
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        body = json.dumps(payload).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self._writer.write(head + body)
        assert self._reader is not None
        response_head = self.head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(response_head.split(b" ", 2)[1])
        length = _LENGTH.search(response_head)
        if length is None:
            await self.close()
            raise ValueError(f"a response without Content-Length: {response_head[:200]!r}")
        answer = await self._reader.readexactly(int(length.group(1)))
        if _CLOSE.search(response_head):
            await self.close()
        return status, answer

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None
