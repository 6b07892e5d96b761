"""service/execution/channel.py's Channel over a stand-in worker process (a few lines of Python speaking the same
frames): calls are answered; closing it never raises in its reader thread (CI once saw the reader read a socket that
close() had just closed); a frame that does not unpickle ends the process and fails the call with WorkerDied."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

import pytest

from service.execution.channel import Channel, WorkerDied

STAND_IN = """
import pickle, sys
from multiprocessing.connection import Connection
conn = Connection(int(sys.argv[1]))
while True:
    try:
        call_id, op, args = pickle.loads(conn.recv_bytes())
    except EOFError:
        break
    if op == "garbage":
        conn.send_bytes(b"not a pickle")
        continue
    conn.send_bytes(pickle.dumps((call_id, True, args), protocol=5))
    if op == "exit":
        break
"""


@pytest.fixture
def thread_errors(monkeypatch):
    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    return errors


def _channel(deaths: list[str]) -> Channel:
    ours, theirs = socket.socketpair()
    process = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, str(theirs.fileno())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL
    )
    theirs.close()
    return Channel("stand-in", process, Connection(ours.detach()), lambda channel, cause: deaths.append(cause))


def test_calls_are_answered_and_closing_leaves_the_reader_quiet(thread_errors):
    deaths: list[str] = []
    for _ in range(10):
        channel = _channel(deaths)
        assert channel.call("echo", 1, "zwei") == (1, "zwei")
        reader = channel._reader
        channel.close()
        reader.join(timeout=5)
        assert not reader.is_alive()
        assert channel.process.returncode == 0
    assert thread_errors == []
    assert deaths == []  # asked to end: no death reported


def test_an_unreadable_answer_ends_the_process_and_fails_the_call(thread_errors):
    deaths: list[str] = []
    channel = _channel(deaths)
    try:
        with ThreadPoolExecutor(1) as pool, pytest.raises(WorkerDied, match="SIGKILL"):
            pool.submit(channel.call, "garbage").result(timeout=30)  # before the fix: no answer, ever
        assert deaths == ["SIGKILL"]
        with pytest.raises(WorkerDied):
            channel.call("echo")
    finally:
        channel.close()
    assert thread_errors == []
