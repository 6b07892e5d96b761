"""Scale-out (issue 32), with real processes: three replicas of the service on loopback ports sharing one
redis-server (Debian's package), and Debian's nginx in front of them with the shipped deploy/nginx/nginx.conf
(its upstream pointed at the three ports). One set of processes serves the whole module, in this order: key rate
limit across replicas, a cache hit on another replica, an admin version load followed by all, Redis killed under
load (and back), one replica killed under load behind nginx."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from bundle_copies import copy_bundle
from live_server import ROOT, free_port
from redis_server import REDIS_SERVER, RedisServer
from reliability_helpers import log_entries, metric, start_server

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
KEY, ADMIN = "scale-key-1", "scale-admin"
RATE, BURST = 5, 2  # work requests per second for KEY across the replicas, and its bucket
OPEN = "/healthz,/readyz,/metrics,/v1/translate"  # translations need no key here; /v1/embed is KEY's (rate test)

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed (install-test-tools)")


@pytest.fixture(scope="module")
def cluster(tiny_bundle_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    repository = root / "repository"
    copy_bundle(tiny_bundle_dir, repository / "de-en" / "1")
    copy_bundle(tiny_bundle_dir, repository / "de-en" / "2", version="2")
    redis = RedisServer(root / "redis").start()
    env = {
        "MT_REDIS_URL": redis.url,
        "MT_REDIS_TIMEOUT_S": "0.3",
        "MT_REPLICAS": "3",
        "MT_CACHE_MB": "8",
        "MT_MODEL_VERSIONS": "de-en=1",
        "MT_ADMIN_KEY": ADMIN,
        "MT_API_KEYS": KEY,
        "MT_OPEN_PATHS": OPEN,
        "MT_KEY_RATE_PER_S": str(RATE),
        "MT_KEY_BURST": str(BURST),
        "MT_MAX_WAIT_MS": "5",
    }
    replicas = []
    try:
        for i in range(3):
            state = {"MT_STATE_DIR": str(root / f"state{i}")}
            replicas.append(start_server(repository, {**env, **state}, root / f"replica{i}.log"))
        yield redis, replicas
    finally:
        for server in replicas:
            server.stop()
        redis.kill()


def translate(url: str, text: str, client: httpx.Client | None = None) -> httpx.Response:
    return (client or httpx).post(url + "/v1/translate", json={"texts": [text]}, timeout=30)


def test_a_key_limited_to_r_per_second_gets_r_in_total_across_three_replicas(cluster):
    """Six clients flood the key's work path on the three replicas for 6 s. The replicas' own access logs say when
    each answer was decided (its time less its latency) and what it was: the key got what one bucket of RATE per
    second admits from those arrivals, within 10%, and never more than RATE over the span plus the bucket."""
    _, replicas = cluster
    refused, stop = [0], time.monotonic() + 6.0

    def flood(url: str) -> None:
        with httpx.Client(headers={"X-API-Key": KEY}, timeout=30) as client:
            while time.monotonic() < stop:
                refused[0] += client.post(url + "/v1/embed", json={"texts": ["Hallo"]}).status_code == 429

    threads = [threading.Thread(target=flood, args=(r.url,)) for r in replicas * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    decided = []
    for r in replicas:
        for e in log_entries(Path(r.log_path)):
            if e.get("endpoint") == "/v1/embed" and e.get("api_key"):
                at = datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp() - e["latency_ms"] / 1000
                decided.append((at, e["status"]))
    decided.sort()
    admitted = sum(status == 200 for _, status in decided)
    # what one token bucket of RATE and BURST admits from these very arrivals (a pause in the arrivals on a busy
    # machine wastes tokens however the limit is shared); three separate buckets would admit up to three times it
    tokens, last, ideal = float(BURST), decided[0][0], 0
    for at, _ in decided:
        tokens, last = min(BURST, tokens + (at - last) * RATE), at
        if tokens >= 1:
            tokens, ideal = tokens - 1, ideal + 1
    ceiling = RATE * (decided[-1][0] - decided[0][0]) + BURST
    assert refused[0] > 0, "the clients never went over the limit: the test proves nothing"
    assert abs(admitted - ideal) <= 0.1 * ideal, (admitted, ideal, ceiling, refused[0])
    assert admitted <= 1.1 * ceiling, (admitted, ceiling)


def test_a_repeated_text_is_a_cache_hit_on_another_replica(cluster):
    _, (one, _, three) = cluster
    text = "Ein Hund läuft über die Wiese."
    first = translate(one.url, text)
    assert first.status_code == 200
    hits, batches = metric(three.url, "mt_cache_hits_total"), metric(three.url, "mt_batch_size_count")
    again = translate(three.url, text)
    assert again.status_code == 200
    assert again.json()["translations"][0]["text"] == first.json()["translations"][0]["text"]
    assert metric(three.url, "mt_cache_hits_total") == hits + 1
    assert metric(three.url, "mt_batch_size_count") == batches  # the hit skipped the queue and the engine


def test_an_admin_version_load_on_one_replica_is_served_by_all_within_seconds(cluster):
    _, replicas = cluster
    answer = httpx.post(
        replicas[0].url + "/v1/models/de-en/load",
        json={"version": "2"},
        headers={"X-Admin-Key": ADMIN, "X-API-Key": KEY},
    )
    assert answer.status_code == 200, answer.text
    deadline = time.monotonic() + 30
    versions = []
    while time.monotonic() < deadline:
        versions = [translate(r.url, "Guten Morgen.").json()["version"] for r in replicas]
        if versions == ["2", "2", "2"]:
            break
        time.sleep(0.5)
    assert versions == ["2", "2", "2"]
    models = httpx.get(replicas[2].url + "/v1/models", headers={"X-API-Key": KEY}).text
    assert "announced by replica" in models


class Load:
    """Clients translating in a loop (texts numbered, so most are misses) until stopped; every answer counted."""

    def __init__(self, urls: list[str], clients: int = 3) -> None:
        self.statuses: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(urls[i % len(urls)], i)) for i in range(clients)]

    def _run(self, url: str, n: int) -> None:
        with httpx.Client(timeout=30) as client:
            i = 0
            while not self._stop.is_set():
                i += 1
                try:
                    self.statuses.append(translate(url, f"Der Hund {n} sieht {i % 7} Katzen.", client).status_code)
                except httpx.HTTPError as exc:
                    self.errors.append(repr(exc))

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


def test_redis_killed_under_load_fails_no_translation_and_recovers_when_it_returns(cluster):
    redis, replicas = cluster
    urls = [r.url for r in replicas]
    with Load(urls) as load:
        time.sleep(1.0)
        redis.kill()
        time.sleep(3.0)
        down = [metric(u, "mt_state_store_up") for u in urls]
        ready = [httpx.get(u + "/readyz").json() for u in urls]
        redis.start()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(metric(u, "mt_state_store_up") != 1 for u in urls):
            time.sleep(0.5)
        up = [metric(u, "mt_state_store_up") for u in urls]
    assert load.errors == [] and load.statuses and set(load.statuses) == {200}, (load.errors, set(load.statuses))
    assert down == [0, 0, 0]
    assert all(r["status"] == "ready" and r["state_store"].startswith("degraded") for r in ready)
    assert up == [1, 1, 1]
    log = Path(replicas[0].log_path).read_text()
    assert "state store DEGRADED" in log and "state store RECOVERED" in log
    text = "Die Katze schläft im Garten."  # shared again: a new text cached by one replica is a hit on another
    translate(urls[1], text)
    hits = metric(urls[0], "mt_cache_hits_total")
    translate(urls[0], text)
    assert metric(urls[0], "mt_cache_hits_total") == hits + 1


def nginx_config(ports: list[int], listen: int, workdir: Path) -> str:
    """deploy/nginx/nginx.conf with its upstream on the replicas' loopback ports (no Docker DNS here)."""
    text = (ROOT / "deploy/nginx/nginx.conf").read_text()
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=2 fail_timeout=5s;" for p in ports)
    text, n = re.subn(r"^\s*server mt:8000 resolve.*$", servers, text, flags=re.M)
    assert n == 1
    text = re.sub(r"^\s*resolver .*$", "", text, flags=re.M)
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{listen};").replace("/tmp/nginx.pid", str(workdir / "pid"))
    for path in ("client_body_temp", "proxy_temp", "fastcgi_temp", "uwsgi_temp", "scgi_temp"):
        text = text.replace("http {", f"http {{\n    {path}_path {workdir / path};", 1)
    return text.replace("access_log /dev/stdout upstream;", f"access_log {workdir / 'access.log'} upstream;")


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (scripts/install-test-tools.sh installs it)")
def test_one_replica_killed_under_load_behind_nginx_loses_no_accepted_request(cluster, tmp_path):
    _, replicas = cluster
    port = free_port()
    (tmp_path / "nginx.conf").write_text(nginx_config([r.port for r in replicas], port, tmp_path))
    command = [NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"]
    nginx = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "error.log", "wb"))  # noqa: SIM115
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/nginx-health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        with Load([url], clients=4) as load:
            time.sleep(1.5)
            replicas[2].process.kill()
            time.sleep(3.0)
        assert load.errors == [] and len(load.statuses) > 10
        assert set(load.statuses) == {200}, sorted(set(load.statuses))
        served = (tmp_path / "access.log").read_text()
        assert f"127.0.0.1:{replicas[2].port}" in served  # the killed replica had served its share before
    finally:
        nginx.terminate()
        nginx.wait(10)
