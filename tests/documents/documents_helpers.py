"""Upload a file to /v1/documents and wait for its translation."""

from __future__ import annotations

import time

import httpx


def upload(client: httpx.Client, name: str, data: bytes, **fields: str) -> httpx.Response:
    return client.post("/v1/documents", files={"file": (name, data)}, data={"target_language": "en", **fields})


def finished(client: httpx.Client, job_id: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get(f"/v1/documents/{job_id}").json()
        if status["status"] in ("done", "failed"):
            return status
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not finished in {timeout} s: {status}")


def translate(client: httpx.Client, name: str, data: bytes) -> bytes:
    accepted = upload(client, name, data)
    assert accepted.status_code == 202, accepted.text
    status = finished(client, accepted.json()["id"])
    assert status["status"] == "done" and status["progress"] == 1.0, status
    assert status["sentences_done"] == status["sentences_total"] > 0
    result = client.get(status["result_url"])
    assert result.status_code == 200, result.text
    return result.content
