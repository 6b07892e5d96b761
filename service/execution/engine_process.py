"""The engine worker process (MT_ENGINE_PROCESS=true): one model's engine, its sessions, searches and live decode,
in a process of its own, driven over one socket by the server process (service/execution/remote.py).

Started as ``python -m service.execution.engine_process FD BUNDLE_PATH`` with the socket's descriptor inherited and
the ``EngineSpec`` as the first message. It builds the engine, runs the warm-up translation, answers
``("ready", info)`` and then serves calls. Every message, both ways, is one frame (multiprocessing's
``Connection``: a length, then the bytes) holding one pickle of protocol 5: ``(call id, operation, arguments)`` in,
``(call id, ok, result or exception)`` out. Whole batches run on a pool of threads (MT_ENGINE_WORKERS of them, as
in the server process); the live decode's calls run in order on one thread of their own (the continuous
scheduler's engine thread is their one caller). The process ends when the socket closes (the server went away) or
on ``exit``; a crash in native code ends only this process: the server sees the socket close at once.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from core.bundle import load_bundle
from engine.engine import Engine
from engine.live import LiveBatch, supports_live
from service.execution.engine_build import EngineSpec, build_engine
from service.execution.work import engine_runner

log = logging.getLogger(__name__)

PROTOCOL = 5
PROBE_TEXTS = ["Warm-up."]  # the warm-up translation, also the probe (worker.py PROBE_OPTIONS: beam 2)


def dumps(message: Any) -> bytes:
    return pickle.dumps(message, protocol=PROTOCOL)


def engine_info(engine: Engine, live: bool) -> dict[str, Any]:
    """What the server process reads of the engine without a call (remote.py ``EngineFacade``)."""
    return {
        "pid": os.getpid(),
        "variant": engine.variant,
        "providers": list(engine.providers),
        "threads": engine.threads,
        "fused_step": engine.fused_step,
        "device": engine.device_runner is not None,
        "max_source_tokens": engine.max_source_tokens,
        "decoding": dict(engine.decoding),
        "live": live,
        "bytes_per_position": LiveBatch(engine).bytes_per_position() if live else 0,
    }


class EngineServer:
    """The worker process's side of the socket: the engine, its live decode, the calls they answer."""

    def __init__(self, conn: Connection, engine: Engine, workers: int, live: bool) -> None:
        self.conn, self.engine = conn, engine
        self.run_batch = engine_runner(engine)
        self.live = LiveBatch(engine) if live else None
        self.inline = workers <= 1  # one caller at a time (one engine worker, or the continuous engine thread)
        self._batches = ThreadPoolExecutor(max(1, workers), thread_name_prefix="batch")
        self._live_thread = ThreadPoolExecutor(1, thread_name_prefix="live")
        self._send_lock = threading.Lock()

    def send(self, message: Any) -> None:
        try:
            data = dumps(message)
        except Exception as exc:  # an unpicklable exception or result: say what it was
            data = dumps((message[0], False, RuntimeError(f"unpicklable answer: {exc!r}")))
        with self._send_lock:
            self.conn.send_bytes(data)

    def serve(self) -> None:
        """Read calls until the socket closes or ``exit`` comes; each is answered by the thread that runs it."""
        while True:
            try:
                call_id, op, args = pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                return
            if op == "exit":
                self.send((call_id, True, None))
                return
            if op == "ping":  # the channel's own cost (bench/engine_process.py)
                self.send((call_id, True, args))
                continue
            if self.inline:  # one engine worker: one call at a time comes, run it here (no thread hand-off)
                self._answer(call_id, op, args)
                continue
            pool = self._batches if op in ("batch", "translate") else self._live_thread
            pool.submit(self._answer, call_id, op, args)

    def _answer(self, call_id: int, op: str, args: tuple) -> None:
        try:
            result = self._run(op, args)
        except Exception as exc:
            self.send((call_id, False, exc))
            return
        self.send((call_id, True, result))

    def _run(self, op: str, args: tuple) -> Any:
        if op == "batch":
            return self.run_batch(*args)
        if op == "translate":
            return self.engine.translate(*args)
        live = self.live
        if live is None:
            raise RuntimeError("this engine has no live decode")
        if op == "join":
            done, encode_s = live.add(args[0])
            return done, encode_s, live.rows
        if op == "step":
            return live.step(), live.rows
        if op == "leave":
            return live.remove(args[0]), live.rows
        if op == "reset":
            self.live = LiveBatch(self.engine)
            return None
        raise ValueError(f"unknown operation {op!r}")


def main(argv: list[str]) -> int:
    fd, bundle_path = int(argv[0]), argv[1]
    # the server decides when this process ends (``exit``, or its socket closing): a terminal's Ctrl-C, a hang-up or a
    # SIGTERM sent to the whole process group must not end it while the server drains
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    conn = Connection(fd)
    from service.observability import logs  # JSON lines on the server's stderr, as the server's own

    spec, workers, want_live, log_level = pickle.loads(conn.recv_bytes())
    logs.configure(log_level)
    assert isinstance(spec, EngineSpec)
    try:
        engine = build_engine(load_bundle(bundle_path, verify=False), spec)  # the server verified it
        from engine.decoding import TranslateOptions

        engine.translate(PROBE_TEXTS, TranslateOptions(beam_size=2))
        live = want_live and supports_live(engine)
    except Exception as exc:
        log.exception("engine worker process: the engine of %s could not be built", bundle_path)
        conn.send_bytes(dumps(("failed", False, RuntimeError(f"{type(exc).__name__}: {exc}"))))
        return 1
    conn.send_bytes(dumps(("ready", True, engine_info(engine, live))))
    EngineServer(conn, engine, workers, live).serve()
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))  # no waiting on pool threads still decoding for a server that went away
