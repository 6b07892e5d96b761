"""Where a live server's CPU goes, per request, scheduler against scheduler: py-spy samples of ``python -m service``
under load, sorted into the engine thread's parts and the event loop.

    python -m bench.profile_server --data ../shared/data/multi30k [--modes continuous dynamic off] \
        [--clients 64] [--requests 600] [--beam-size 4] [--variant int8] [--stream] \
        [--settings '' MT_LANGUAGE_MISMATCH=off] [--texts 1] [--floors] [--client httpx|raw]

For each mode (a mode may be listed again, to alternate), a server is started as bench/serving.py starts it (same
settings), warmed up, and sent the same --requests requests (one sentence each, test_2016_flickr in order) by
--clients clients while ``py-spy record --threads --format raw`` samples it (py-spy counts only threads that run,
so samples are CPU time). ``--texts N`` puts N sentences in each request instead (the same sentences, in fewer
requests). The table gives CPU milliseconds per sentence (samples x 1000 / --rate, over the sentences answered) in

- ``step graph``: onnxruntime running the decoder step (engine thread);
- ``encoder``: onnxruntime running the encoder;
- ``search (Python)``: the search around the step graph (engine/live.py, search.py, the cache gathers);
- ``cache gather``: the part of the previous that reorders the key/value cache (engine/reorder.py);
- ``scheduler``: the rest of the engine thread (admission, metrics, hand-over to the event loop);
- ``event loop``: the main thread (HTTP, JSON, tokenization, language check);
- ``other``: any other thread.

A second table holds the ratio issue 33 sets a target for: the server's CPU per request over its engine thread's
(``server/engine``), from py-spy's samples (all threads over the engine thread's) and from the kernel's own count
(``/proc/<pid>/stat`` for the process, ``/proc/<pid>/task/<tid>/stat`` for the engine thread). py-spy counts a
thread that is runnable but waiting for a core as running, so on a shared machine its samples overstate whichever
thread waits most; the kernel counts only CPU time used. ``--raw DIR`` keeps py-spy's samples for a closer look.

``--floors`` adds the HTTP stack's own cost in the same run (bench/http_floor.py: a bare ASGI app, and a FastAPI
route with the request's fields, each under ``python -m service``'s uvicorn set-up and guarded h11 protocol, with a
fixed answer): their whole process CPU per sentence, driven by the same clients with the same requests. Beside the
server's CPU outside its engine thread, they show how much of that any Python server of this stack pays, and so
how far the 1.15x target is from the floor.

Needs ``py-spy`` (in the ``bench`` extra) and permission to attach to a child process (ptrace; root in a
container, or kernel.yama.ptrace_scope 0).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import ROOT, ServerProcess, cpu_model
from bench.serving import closed_loop, service
from bench.serving import parse_args as serving_args

CATEGORIES = ["step graph", "encoder", "search (Python)", "cache gather", "scheduler", "event loop", "other"]
ENGINE_CATEGORIES = ("step graph", "encoder", "search (Python)", "scheduler")  # the engine thread's, whole
SEARCH_FRAMES = (
    "engine/live.py",
    "engine/source_slots.py",
    "engine/search.py",
    "engine/engine.py",
)


def categorize(stack: str) -> list[str]:
    """The categories of one py-spy raw stack (thread first, outermost frame first); a cache gather also counts
    as search (Python)."""
    frames = stack.split(";")
    thread, frames = frames[0], frames[1:]
    if "engine" not in thread:
        return ["event loop"] if "MainThread" in thread else ["other"]
    if any("run_encoder" in f for f in frames):
        return ["encoder"]
    if any("onnxruntime_inference_collection" in f for f in frames):  # InferenceSession.run
        return ["step graph"]
    if any(s in f for f in frames for s in SEARCH_FRAMES):
        gather = any("engine/reorder.py" in f for f in frames)  # ReorderBuffers.take
        return ["search (Python)", "cache gather"] if gather else ["search (Python)"]
    return ["scheduler"]


def drive(url: str, sentences: list[str], args: argparse.Namespace) -> tuple[int, float]:
    """bench/serving.py's closed-loop clients with this run's --clients, --beam-size, --stream, --texts and
    --client (streams always on httpx); (sentences answered, seconds)."""
    result = asyncio.run(
        closed_loop(
            url,
            sentences,
            args.clients,
            args.beam_size,
            args.model,
            stream=args.stream,
            client_kind="httpx" if args.stream else args.client,
            texts=args.texts,
        )
    )
    return result.sentences - result.errors, result.seconds


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each live thread of process ``pid``, by thread id, and of the whole process
    (threads that ended included) under key 0, from /proc."""

    def seconds(stat: str) -> float:
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    out = {0: seconds(Path(f"/proc/{pid}/stat").read_text())}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            out[int(tid)] = seconds(Path(f"/proc/{pid}/task/{tid}/stat").read_text())
    return out


def engine_threads(raw: str) -> set[int]:
    """Thread ids of the engine threads named in py-spy's raw samples (``thread (<tid>): engine-<model>...``)."""
    return {int(tid) for tid in re.findall(r"^thread \((\d+)\): engine", raw, flags=re.MULTILINE)}


def profile(
    server: ServerProcess, sentences: list[str], args: argparse.Namespace, out: Path
) -> tuple[int, float, dict, tuple[float, float]]:
    """py-spy samples of the server while it answers ``sentences`` (after a warm-up); (answered, seconds, counts,
    (process CPU seconds, engine threads' CPU seconds) from /proc over the same requests)."""
    drive(server.url, sentences[: args.warmup], args)
    spy = subprocess.Popen(
        [args.py_spy, "record", "--pid", str(server.pid), "--rate", str(args.rate), "--format", "raw",
         "--threads", "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    time.sleep(1.0)  # attached (an idle server gives no samples meanwhile)
    try:
        before = thread_cpu(server.pid)
        answered, seconds = drive(server.url, sentences, args)
        after = thread_cpu(server.pid)
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its samples on Ctrl-C
        _, err = spy.communicate(timeout=60)
    if not out.exists():
        raise SystemExit(f"py-spy wrote nothing ({spy.returncode}): {err.decode(errors='replace')[-500:]}")
    counts: collections.Counter = collections.Counter()
    raw = out.read_text()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        for category in categorize(stack):
            counts[category] += int(n)
    engine = sum(after[t] - before.get(t, 0.0) for t in engine_threads(raw) if t in after)
    return answered, seconds, counts, (after[0] - before[0], engine)


FLOORS = {"asgi": "HTTP floor: bare ASGI", "fastapi": "HTTP floor: FastAPI route"}


def floor(kind: str, sentences: list[str], args: argparse.Namespace, log_dir: Path) -> tuple[int, float, float]:
    """bench/http_floor.py's ``kind`` app driven as the server is; (sentences answered, seconds, its CPU seconds)."""
    server = ServerProcess(
        None,
        {"MT_LOG_LEVEL": "warning"},
        log_dir / f"floor-{kind}.log",
        command=[sys.executable, "-m", "bench.http_floor", kind],
    )
    server.start(timeout=60)
    try:
        drive(server.url, sentences[: args.warmup], args)
        before = server.cpu_seconds()
        answered, seconds = drive(server.url, sentences, args)
        return answered, seconds, server.cpu_seconds() - before
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_server", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--model", default="de-en")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--modes", nargs="+", default=["continuous", "dynamic", "off"])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=600, help="requests sampled per mode (the same sentences)")
    parser.add_argument("--warmup", type=int, default=16, help="requests before sampling starts")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--stream", action="store_true", help='requests with "stream": true, read to the end')
    parser.add_argument("--texts", type=int, default=1, help="sentences per request")
    parser.add_argument(
        "--client", choices=("httpx", "raw"), default="httpx", help="the clients' HTTP client (bench/raw_client.py)"
    )
    parser.add_argument("--floors", action="store_true", help="add bench/http_floor.py's two apps (HTTP stack alone)")
    parser.add_argument("--variant", default="int8")
    parser.add_argument(
        "--trees", type=Path, nargs="+", default=[ROOT], help="source trees to run the server from, in turn per mode"
    )
    parser.add_argument(
        "--settings",
        nargs="+",
        default=[""],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="MT_* settings added to the server's, one set per entry ('' = none), run in turn per mode as --trees",
    )
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw samples here (<mode>-<run>.txt)")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"))
    args = parser.parse_args(argv)
    if not Path(args.py_spy).exists():
        raise SystemExit("py-spy not found: pip install -e '.[bench]'")
    # the servers bench/serving.py starts, with its default settings
    server_args = serving_args(
        ["--repository", str(args.repository), "--model", args.model, "--variant", args.variant]
        + ["--clients", str(args.clients)]
    )
    lines = (args.data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    sentences = [lines[i % len(lines)] for i in range(args.requests)]
    ms = 1000 / args.rate
    per_request = f"{args.texts} sentences per request" if args.texts > 1 else "one sentence per request"
    print(
        f"{cpu_model()}; {args.clients} {args.client} clients, beam {args.beam_size}, {args.variant}, "
        f"{args.requests} sentences, {per_request}"
    )
    print(f"CPU ms per sentence (1 sample = {ms:g} ms)")
    print("| mode | answered | sentences/s | " + " | ".join(CATEGORIES) + " | total |")
    print("|---|---:|---:|" + "---:|" * (len(CATEGORIES) + 1))
    done: list[str] = []
    ratios: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-profile-server-") as tmp:
        raw = args.raw or Path(tmp)
        raw.mkdir(parents=True, exist_ok=True)
        runs = ((m, t.resolve(), e) for m in args.modes for t in args.trees for e in args.settings)
        for mode, tree, extra in runs:
            label = mode if len(args.trees) == 1 else f"{mode} @ {tree.name}"
            label += f" {extra}" if len(args.settings) > 1 else ""
            server = service(mode, server_args, Path(tmp))
            server.cwd = tree
            server.env.update(dict(item.split("=", 1) for item in extra.split(",") if item))
            try:
                server.start(timeout=300)
                answered, seconds, counts, (cpu, engine_cpu) = profile(
                    server, sentences, args, raw / f"{mode}-{len(done)}.txt"
                )
                done.append(mode)
            finally:
                server.stop()
            per = {c: counts[c] * ms / max(1, answered) for c in CATEGORIES}
            total = sum(v for c, v in per.items() if c != "cache gather")  # (the gather is inside search)
            cells = " | ".join(f"{per[c]:.2f}" for c in CATEGORIES)
            print(f"| {label} | {answered} | {answered / seconds:.1f} | {cells} | {total:.2f} |", flush=True)
            sampled = sum(counts[c] for c in ENGINE_CATEGORIES)
            n = max(1, answered)
            ratios.append(
                f"| {label} | {total / max(1e-9, sampled * ms / n):.2f} | {cpu * 1000 / n:.2f} "
                f"| {engine_cpu * 1000 / n:.2f} | {(cpu - engine_cpu) * 1000 / n:.2f} "
                f"| {0.15 * engine_cpu * 1000 / n:.2f} | {cpu / max(1e-9, engine_cpu):.2f} |"
            )
        for kind in FLOORS if args.floors else ():
            answered, seconds, cpu = floor(kind, sentences, args, Path(tmp))
            ms_per = cpu * 1000 / max(1, answered)
            ratios.append(
                f"| {FLOORS[kind]} ({answered / seconds:.0f} sentences/s) | - | {ms_per:.2f} | - | {ms_per:.2f} "
                "| - | - |"
            )
    print("\nserver CPU over engine-thread CPU per sentence (target <= 1.15 at 64 clients, issue 33)")
    print(
        "| mode | server/engine (py-spy) | server ms (/proc) | engine thread ms (/proc) | outside the engine thread ms "
        "| the target's room outside (0.15 x engine) | server/engine (/proc) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
