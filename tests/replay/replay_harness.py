"""Send the recorded requests (recorded.py) to a live server and reduce each answer to what must not change.

An answer is ``{"status", "content_type", "body"}``: the body parsed as JSON when it is JSON (with the fields that
legitimately differ from run to run replaced by "<normalized>"), a list of Server-Sent Events for event streams, the
text otherwise. Every request carries ``X-Request-ID: replay-<name>``, so error bodies that quote the request id are
stable too.
"""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ANSWERS = HERE / "answers.json"
MODEL_REPOSITORY = HERE.parent.parent / "model_repository"

# set-ups recorded: name -> environment of the server (the shipped model_repository, as `make serve` serves it).
# "fused" needs the fused step's library (built by the test) and a CPU the operator runs on
SETUPS: dict[str, dict[str, str]] = {
    "dynamic": {"MT_SCHEDULER": "dynamic", "MT_FUSED_STEP": "false", "MT_MAX_WAIT_MS": "5"},
    "continuous": {"MT_SCHEDULER": "continuous", "MT_FUSED_STEP": "false"},
    "fused": {"MT_SCHEDULER": "dynamic", "MT_FUSED_STEP": "true", "MT_MAX_WAIT_MS": "5"},
}

# keys whose values are times or durations: their presence is compared, not their value (ids are HEX_ID below)
VARYING = {"creation_time", "created", "started", "finished", "seconds_remaining"}


# ids inside strings (a result URL names its job) and the server's own address (a new free port each run)
HEX_ID = re.compile(r"[0-9a-f]{32}")


def normalize(value: Any, url: str = "") -> Any:
    if isinstance(value, dict):
        return {k: "<normalized>" if k in VARYING else normalize(v, url) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v, url) for v in value]
    if isinstance(value, str):
        return HEX_ID.sub("<id>", value.replace(url, "<server>") if url else value)
    return value


def _fill(value: Any, saved: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, got in saved.items():
            value = value.replace("{" + name + "}", got)
        return value
    if isinstance(value, dict):
        return {k: _fill(v, saved) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, saved) for v in value]
    return value


def _events(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.replace("\r\n", "\n").strip().split("\n\n"):
        event: dict[str, Any] = {}
        for line in block.splitlines():
            field, _, data = line.partition(":")
            event[field] = json.loads(data) if field == "data" else data.strip()
        # the JSON of an event is compared as parsed (its spacing is sse-starlette's, not ours)
        events.append(event)
    # the texts of one request are decoded side by side: which text's event comes first is the scheduler's timing,
    # so the events are compared text by text (a stable sort: each text's own events keep their order)
    return sorted(events, key=_text_index)


def _text_index(event: dict[str, Any]) -> int:
    data = event.get("data")
    return data.get("index", 1 << 30) if isinstance(data, dict) else 1 << 30


def reduce(response: httpx.Response, url: str = "") -> dict[str, Any]:
    content_type = response.headers.get("content-type", "")
    if "json" in content_type:
        body: Any = normalize(response.json(), url)
    elif "event-stream" in content_type:
        body = _events(response.text)
    elif content_type.startswith("text/") or "html" in content_type:
        body = response.text
    else:
        body = {"base64": base64.b64encode(response.content).decode()}
    return {"status": response.status_code, "content_type": content_type, "body": body}


def send(client: httpx.Client, request: dict[str, Any], saved: dict[str, str]) -> httpx.Response:
    request = _fill(request, saved)
    headers = {"X-Request-ID": f"replay-{request['name']}", **request.get("headers", {})}
    kwargs: dict[str, Any] = {"headers": headers}
    for key in ("json", "data", "content"):
        if key in request:
            kwargs[key] = request[key]
    if "files" in request:
        kwargs["files"] = {field: (name, text.encode(), kind) for field, (name, text, kind) in request["files"].items()}
    return client.request(request["method"], request["path"], **kwargs)


def replay(url: str, requests: list[dict[str, Any]], timeout: float = 120.0) -> dict[str, dict[str, Any]]:
    """Every request sent in order, one at a time; name -> reduced answer."""
    answers: dict[str, dict[str, Any]] = {}
    saved: dict[str, str] = {}
    with httpx.Client(base_url=url, timeout=timeout) as client:
        for request in requests:
            response = send(client, request, saved)
            poll = request.get("poll")
            deadline = time.monotonic() + timeout
            while poll and response.status_code == 200 and response.json().get(poll["key"]) not in poll["until"]:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{request['name']}: still {response.json()} after {timeout} s")
                time.sleep(0.2)
                response = send(client, request, saved)
            for name, key in request.get("save", {}).items():
                saved[name] = str(response.json()[key])
            answers[request["name"]] = reduce(response, url)
    return answers


def load_answers() -> dict[str, Any]:
    return json.loads(ANSWERS.read_text(encoding="utf-8"))


# the CPU features that choose onnxruntime's (and the fused step's) kernels: scores and weights are compared to the
# last bit, so they hold on a machine with the same features as the one that recorded them
KERNEL_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "fma")


def machine() -> dict[str, Any]:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    return {"kernel_flags": sorted(f for f in KERNEL_FLAGS if f in flags)}


def fused_step_library(folder: Path) -> Path | None:
    """The fused step's library built into ``folder`` by native/build.sh, or None where this machine cannot build or
    run it as recorded (no C compiler, no AVX-512 VNNI: the recorded answers are the VNNI kernels')."""
    import shutil
    import subprocess

    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "avx512_vnni" not in flags or not (shutil.which("cc") or shutil.which("gcc")):
        return None
    out = folder / "libmtserve_fused_step.so"
    subprocess.run(
        ["bash", str(MODEL_REPOSITORY.parent / "native" / "build.sh"), str(out)], check=True, capture_output=True
    )
    return out


def server_env(setup: str, folder: Path) -> dict[str, str] | None:
    """The server's environment for a set-up (None: this machine cannot run it)."""
    env = dict(SETUPS[setup])
    if env.get("MT_FUSED_STEP") == "true":
        library = fused_step_library(folder)
        if library is None:
            return None
        env["MT_FUSED_STEP_LIBRARY"] = str(library)
    return env
