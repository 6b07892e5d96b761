"""deploy/nginx/nginx.conf with Debian's nginx in front of two stand-in replicas on loopback: which requests nginx
passes on to another replica. A translation that reached a failing replica is retried (no side effects); an upload
that creates something (document job, glossary) is sent to one replica at most, and is passed on only when it never
reached one (connection refused)."""

from __future__ import annotations

import os
import re
import socket
import socketserver
import subprocess
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from deploy_helpers import DEPLOY, tool
from live_server import free_port

UPLOADS = ["/v1/documents", "/translate_file", "/v2/document", "/v1/glossaries", "/v2/glossaries"]


def nginx_binary() -> str:
    path = tool("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
    if path is None:
        pytest.skip("nginx is not installed (scripts/install-test-tools.sh installs it)")
    return path


class Replica(ThreadingHTTPServer):
    """Answers every request 200 and counts what it received by path."""

    daemon_threads = True

    def __init__(self) -> None:
        self.received: Counter[str] = Counter()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(handler) -> None:  # noqa: N802 (http.server's naming)
                handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
                self.received[handler.path] += 1
                body = b'{"ok": true}'
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            do_GET = do_POST  # noqa: N815

            def log_message(handler, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


class DyingReplica(socketserver.ThreadingTCPServer):
    """Reads a whole request, counts it, then drops the connection without an answer: a replica that was killed
    (or crashed) after the request reached it, when it may already have acted on it."""

    daemon_threads = True

    def __init__(self) -> None:
        self.received: Counter[str] = Counter()

        class Handler(socketserver.StreamRequestHandler):
            def handle(handler) -> None:
                request_line = handler.rfile.readline().decode()
                length = 0
                while (line := handler.rfile.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                handler.rfile.read(length)
                self.received[request_line.split()[1]] += 1
                handler.connection.shutdown(socket.SHUT_RDWR)

        super().__init__(("127.0.0.1", 0), Handler)


def serve(server: socketserver.BaseServer) -> socketserver.BaseServer:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def adapted_config(upstreams: list[int], listen: int, workdir: Path) -> str:
    """The shipped config with its upstream on loopback ports; max_fails=0 keeps a failing one in the rotation so
    every request meets it in turn (one worker: one round-robin)."""
    text = (DEPLOY / "nginx" / "nginx.conf").read_text()
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=0;" for p in upstreams)
    text, n = re.subn(r"^\s*server mt:8000 resolve.*$", servers, text, flags=re.M)
    assert n == 1
    # as root, nginx's workers run as nobody, who cannot enter pytest's 0700 tmp dirs to buffer a large body
    workers = "user root;\nworker_processes 1;" if os.geteuid() == 0 else "worker_processes 1;"
    text = re.sub(r"^\s*resolver .*$", "", text, flags=re.M).replace("worker_processes auto;", workers)
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{listen};").replace("/tmp/nginx.pid", str(workdir / "pid"))
    for path in ("client_body_temp", "proxy_temp", "fastcgi_temp", "uwsgi_temp", "scgi_temp"):
        text = text.replace("http {", f"http {{\n    {path}_path {workdir / path};", 1)
    return text.replace("access_log /dev/stdout upstream;", f"access_log {workdir / 'access.log'} upstream;")


class Nginx:
    def __init__(self, upstreams: list[int], workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = workdir / "nginx.conf"
        conf.write_text(adapted_config(upstreams, self.port, workdir))
        command = [nginx_binary(), "-p", str(workdir), "-e", str(workdir / "error.log"), "-c", str(conf)]
        self.process = subprocess.Popen([*command, "-g", "daemon off;"], stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/nginx-health").status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError((workdir / "error.log").read_text())

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture
def dying_and_healthy(tmp_path):
    dying, healthy = serve(DyingReplica()), serve(Replica())
    nginx = Nginx([dying.server_address[1], healthy.server_address[1]], tmp_path)
    yield nginx, dying, healthy
    nginx.stop()
    for server in (dying, healthy):
        server.shutdown()
        server.server_close()


def test_a_translation_that_reached_a_dying_replica_is_retried_on_another(dying_and_healthy):
    nginx, dying, healthy = dying_and_healthy
    statuses = [httpx.post(nginx.url + "/v1/translate", json={"texts": ["Hallo"]}).status_code for _ in range(6)]
    assert statuses == [200] * 6
    assert healthy.received["/v1/translate"] == 6
    assert dying.received["/v1/translate"] >= 1  # some met the dying replica first, and were passed on


def test_an_upload_that_reached_a_replica_is_never_sent_to_a_second(dying_and_healthy):
    nginx, dying, healthy = dying_and_healthy
    for path in UPLOADS:
        statuses = [httpx.post(nginx.url + path, content=b"x" * 2048).status_code for _ in range(4)]
        # each upload reached exactly one replica: the dying one's got 502, nothing was sent twice
        assert dying.received[path] + healthy.received[path] == 4, path
        assert dying.received[path] >= 1 and statuses.count(502) == dying.received[path], (path, statuses)
        assert statuses.count(200) == healthy.received[path]
    # the same location still retries what has no side effects (a GET of a job or a result)
    statuses = [httpx.get(nginx.url + "/v1/documents/job-1").status_code for _ in range(4)]
    assert statuses == [200] * 4 and dying.received["/v1/documents/job-1"] >= 1


def test_an_upload_that_reached_no_replica_is_passed_on(tmp_path):
    """Connection refused (a replica gone, its address still listed): nothing was sent, so an upload is safe to pass
    on, and it is."""
    healthy = serve(Replica())
    nginx = Nginx([free_port(), healthy.server_address[1]], tmp_path)
    try:
        statuses = [httpx.post(nginx.url + "/v1/documents", content=b"x" * 2048).status_code for _ in range(4)]
        assert statuses == [200] * 4 and healthy.received["/v1/documents"] == 4
        # an upload above the general 1 MiB body cap, under the document cap, reaches the replica
        big = httpx.post(nginx.url + "/v1/documents", content=b"x" * (3 << 20), timeout=30)
        assert big.status_code == 200
        assert httpx.post(nginx.url + "/v1/translate", content=b"x" * (3 << 20)).status_code == 413
    finally:
        nginx.stop()
        healthy.shutdown()
        healthy.server_close()
