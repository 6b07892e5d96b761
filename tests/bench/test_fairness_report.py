"""bench/fairness.py's verdict and flood process: controls explain the goal's run and are never judged; the flood
really runs in another process (through the same pickling a benchmark run uses)."""

from __future__ import annotations

import json
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.fairness import Run, flood_in_process, verdict
from bench.overload import Outcome


def _outcomes(latencies_ms: list[float], status: int = 200) -> list[Outcome]:
    return [Outcome(i * 0.1, status, ms / 1000) for i, ms in enumerate(latencies_ms)]


def _run(alone_ms: float, flooded_ms: float, control: str = "") -> Run:
    run = Run("dynamic", "2 keys", key_rate=3.0, control=control)
    run.alone, run.flooded = _outcomes([alone_ms] * 10), _outcomes([flooded_ms] * 10)
    run.flood = _outcomes([1.0] * 5, 429)
    return run


def test_verdict_judges_the_goal_run_and_skips_controls():
    checks = verdict([_run(50, 90), _run(50, 500, "refused only"), _run(50, 400, "admitted only")])
    assert len(checks) == 3  # p99 ratio, quiet refused, flood refused: for the goal's run only
    assert checks[0].startswith("ok: dynamic, 2 keys: quiet p99 under the flood 90 ms = 1.80x")
    assert verdict([_run(50, 101)])[0].startswith("FAIL")


def test_flood_runs_in_a_spawned_process():
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 (http.server's naming)
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"detail": "no"}).encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            future = pool.submit(flood_in_process, url, {"q": ["x"]}, 20.0, 0.5, {"X-API-Key": "k"})
            outcomes, sent_rps = future.result(timeout=60)
    finally:
        server.shutdown()
    assert len(outcomes) == 10 and {o.status for o in outcomes} == {401} and sent_rps > 0
    assert "no" in outcomes[0].detail
