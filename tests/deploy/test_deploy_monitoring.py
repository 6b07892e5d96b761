"""Prometheus scrape config, Grafana provisioning and dashboard, and a real Prometheus scraping the service."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from deploy_helpers import (
    DASHBOARD,
    DEPLOY,
    METRIC_NAME,
    PROMETHEUS_CONFIG,
    ROOT,
    SERVICE_METRICS,
    allowed_series,
    entrypoint_server,
    load_yaml,
    run,
    tool,
)
from live_server import free_port

# Values for Grafana's template variables when a panel query is run outside Grafana.
GRAFANA_VARIABLES = {"$__rate_interval": "15s", "$model": ".*", "$endpoint": "/v1/.*"}


def promtool() -> str:
    path = tool("promtool")
    if path is None:
        pytest.skip("promtool is not installed (scripts/install-test-tools.sh installs prometheus)")
    return path


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panel_queries() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard()["panels"] for target in panel.get("targets", [])]


def concrete(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr}"
    return expr


def test_promtool_accepts_the_scrape_config():
    result = run([promtool(), "check", "config", str(PROMETHEUS_CONFIG)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_gate_rejects_a_wrong_config(tmp_path):
    bad = tmp_path / "prometheus.yml"
    bad.write_text("scrape_configs:\n  - job_name: mt\n    scrape_interval: fast\n")
    assert run([promtool(), "check", "config", str(bad)]).returncode != 0


def test_scrape_config_targets_the_compose_service():
    config = load_yaml(PROMETHEUS_CONFIG)
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "mt"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    (sd,) = job["dns_sd_configs"]
    compose = load_yaml(ROOT / "docker-compose.yml")
    assert sd["names"] == ["mt"] and sd["port"] == int(compose["services"]["mt"]["environment"]["MT_PORT"])
    assert "mt" in compose["services"]  # the GPU service's own name; the other variants use it as an alias


def test_dashboard_names_only_exported_metrics():
    allowed = allowed_series()
    queries = panel_queries()
    templating = [v["query"]["query"] for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    used = set()
    for title, expr in queries + [("templating", q) for q in templating]:
        names = set(METRIC_NAME.findall(expr))
        assert names <= allowed, f"{title}: unknown metrics {sorted(names - allowed)}"
        used |= names
    # every required view is there
    for name in (
        "mt_requests_total",
        "mt_request_duration_seconds_bucket",
        "mt_queue_wait_seconds_bucket",
        "mt_batch_size_bucket",
        "mt_queue_depth",
        "mt_generated_tokens_total",
        "mt_model_info",
        "mt_decoder_step_rows_bucket",
        "mt_time_to_first_token_seconds_bucket",
        "mt_live_rows",
        "mt_freed_rows_total",
        "mt_dropped_requests_total",
    ):
        assert name in used, f"no panel uses {name}"
    quantiles = {float(q) for _, expr in queries for q in re.findall(r"histogram_quantile\(([\d.]+)", expr)}
    assert {0.5, 0.95, 0.99} <= quantiles
    assert any("provider" in expr and "mt_model_info" in expr for _, expr in queries)


def test_dashboard_metric_list_matches_the_service_code():
    """The metric list the dashboard is checked against is what service/observability/metrics.py registers."""
    source = (ROOT / "service" / "observability" / "metrics.py").read_text()
    registered = set(re.findall(r'"(mt_[a-z_]+)"', source))
    assert set(SERVICE_METRICS) <= registered, sorted(set(SERVICE_METRICS) - registered)


def test_dashboard_structure_and_datasource():
    board = dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"] == "mt-service"
    datasources = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")["datasources"]
    (source,) = datasources
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        assert panel["targets"], panel["title"]


def test_dashboard_queries_parse_as_promql(tmp_path):
    """promtool parses every query (as a recording rule), after the Grafana variables are filled in."""
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": concrete(expr)}
                    for i, (_, expr) in enumerate(panel_queries())
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = run([promtool(), "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "a:b", "expr": "sum(rate(x[1m])"}]}]})
    )
    assert run([promtool(), "check", "rules", str(path)]).returncode != 0


# ---------------------------------------------------------------------------------------------------
# Real Prometheus against the real service (started through deploy/entrypoint.sh)


def prometheus_config_for(target: str) -> dict:
    """The shipped config with the mt job pointed at one loopback target and scraped every second."""
    config = load_yaml(PROMETHEUS_CONFIG)
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    for job in config["scrape_configs"]:
        if job["job_name"] == "mt":
            job.pop("dns_sd_configs")
            job["static_configs"] = [{"targets": [target]}]
    config["scrape_configs"] = [j for j in config["scrape_configs"] if j["job_name"] == "mt"]
    return config


class PrometheusStarting(Exception):
    """Prometheus listens before its storage is ready and answers 503 "Service Unavailable" (plain text) until then."""


def query(url: str, expr: str) -> dict:
    reply = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5)
    if reply.status_code == 503:
        raise PrometheusStarting(reply.text)
    body = reply.json()
    assert reply.status_code == 200 and body["status"] == "success", (expr, body)
    return body["data"]


def wait_for(url: str, expr: str, timeout: float, log: Path) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = query(url, expr)["result"]
            if result:
                return result
        except (httpx.HTTPError, PrometheusStarting):  # not listening yet, or not ready yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"{expr} did not appear in Prometheus within {timeout}s; log:\n{log.read_text()[-3000:]}")


def test_real_prometheus_scrapes_the_service(tiny_repository, tmp_path):
    binary = tool("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (scripts/install-test-tools.sh installs it)")
    server = entrypoint_server(tiny_repository, tmp_path / "service.log")
    server.start(timeout=90)
    prom_log = tmp_path / "prometheus.log"
    prom = None
    try:
        for text in ("ein mann spielt", "die katze sitzt auf dem ball", "der hund"):
            reply = httpx.post(server.url + "/v1/translate", json={"texts": [text]}, timeout=30)
            assert reply.status_code == 200, reply.text
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config_for(f"127.0.0.1:{server.port}")))
        assert run([promtool(), "check", "config", str(config)]).returncode == 0
        prom_port = free_port()
        prom_url = f"http://127.0.0.1:{prom_port}"
        with open(prom_log, "wb") as log:
            prom = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        series = wait_for(prom_url, 'mt_requests_total{endpoint="/v1/translate"}', 30, prom_log)
        assert {s["metric"]["status"] for s in series} == {"200"}
        assert sum(float(s["value"][1]) for s in series) == 3
        assert all(s["metric"]["job"] == "mt" for s in series)
        info = wait_for(prom_url, "mt_model_info", 10, prom_log)
        assert info[0]["metric"]["model"] == "de-en" and info[0]["metric"]["provider"] == "CPUExecutionProvider"
        # More traffic, then every dashboard query must evaluate on the real series.
        for _ in range(3):
            httpx.post(server.url + "/v1/translate", json={"texts": ["ein kind rennt"]}, timeout=30)
            time.sleep(1.2)
        for _title, expr in panel_queries():
            query(prom_url, concrete(expr))  # asserts status == success
        rate = wait_for(prom_url, 'sum(rate(mt_generated_tokens_total{model=~".*"}[15s])) > 0', 15, prom_log)
        assert float(rate[0]["value"][1]) > 0
        assert wait_for(prom_url, 'up{job="mt"} == 1', 5, prom_log)
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=30)
        code = server.stop(signal.SIGTERM, timeout=40)
    assert code == 0, (tmp_path / "service.log").read_text()[-3000:]
