"""Read a text/event-stream answer of POST /v1/translate ("stream": true) as (event, data) pairs."""

from __future__ import annotations

import json

import httpx


def parse(lines) -> list[tuple[str, dict]]:
    """(event, data) of each event in a stream of lines (comments, e.g. pings, skipped)."""
    events, event, data = [], "message", []
    for line in lines:
        if line == "":
            if data:
                events.append((event, json.loads("\n".join(data))))
            event, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[len("event:") :].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:") :].removeprefix(" "))
    if data:
        events.append((event, json.loads("\n".join(data))))
    return events


def stream_translate(url: str, body: dict, timeout: float = 60.0) -> tuple[httpx.Response, list[tuple[str, dict]]]:
    """POST with stream true; (the response, its events). A non-stream answer (an HTTP error) has no events."""
    with httpx.stream("POST", url + "/v1/translate", json={**body, "stream": True}, timeout=timeout) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
            return response, []
        return response, parse(response.iter_lines())


def texts_of(events: list[tuple[str, dict]]) -> dict[int, str]:
    """Each text's deltas, concatenated."""
    out: dict[int, str] = {}
    for event, data in events:
        if event == "delta":
            out[data["index"]] = out.get(data["index"], "") + data["text"]
    return out


def finals(events: list[tuple[str, dict]]) -> dict[int, dict]:
    return {data["index"]: data["translation"] for event, data in events if event == "translation"}
