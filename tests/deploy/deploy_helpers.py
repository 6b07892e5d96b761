"""Helpers for the deployment tests: repository paths, the external tools they drive, YAML loading."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from live_server import LiveServer  # tests/live_server.py: the real service as a subprocess

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_FILES = [ROOT / "docker-compose.yml"]
ENTRYPOINT = DEPLOY / "entrypoint.sh"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "mt-service.json"
K8S = DEPLOY / "kubernetes"

# The metrics the service exports (the deployment brief's list); the dashboard may use only these.
SERVICE_METRICS = {
    "mt_requests_total": "counter",
    "mt_request_duration_seconds": "histogram",
    "mt_queue_wait_seconds": "histogram",
    "mt_batch_size": "histogram",
    "mt_inference_duration_seconds": "histogram",
    "mt_generated_tokens_total": "counter",
    "mt_queue_depth": "gauge",
    "mt_model_info": "gauge",
    "mt_dropped_requests_total": "counter",
    # continuous batching
    "mt_decoder_step_rows": "histogram",
    "mt_time_to_first_token_seconds": "histogram",
    "mt_live_rows": "gauge",
    "mt_freed_rows_total": "counter",
}
METRIC_NAME = re.compile(r"\bmt_[a-z_]+")


def allowed_series() -> set[str]:
    """Metric names a query may name: counters and gauges as is, histograms with their series suffixes."""
    names = set()
    for name, kind in SERVICE_METRICS.items():
        names.add(name)
        if kind == "histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return names


def tool(name: str) -> str | None:
    """An executable: the one next to this interpreter (dev venv) first, then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def run(cmd: list[str], timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=kwargs.pop("cwd", ROOT), **kwargs)


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def load_yaml_all(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def settings_fields() -> set[str]:
    """Names of the service's settings (MT_<NAME>, lower case, without MT_), read from the code itself."""
    from service.settings import every_setting

    return {env[3:].lower() for env in every_setting()}


def setting_defaults() -> dict[str, object]:
    """Every setting's default by its environment variable (MT_<NAME>); no environment read."""
    from service.settings import every_setting

    return {env: field.get_default(call_default_factory=True) for env, field in every_setting().items()}


def entrypoint_server(repository: Path, log_path: Path, env: dict[str, str] | None = None) -> LiveServer:
    """The real service started through deploy/entrypoint.sh with the container's environment
    (MT_HOST, MT_PORT = a free port, MT_PROVIDERS=cpu); only the interpreter is this one (PYTHON)."""
    return LiveServer(
        repository,
        env={"PYTHON": sys.executable, "MT_PROVIDERS": "cpu", "MT_HOST": "127.0.0.1", **(env or {})},
        command=["bash", str(ENTRYPOINT)],
        log_path=log_path,
    )


# settings whose container value is fixed by the image (not taken from the caller's environment)
CONTAINER_FIXED = {
    "MT_HOST": "0.0.0.0",
    "MT_PORT": "8000",
    "MT_MODEL_REPOSITORY": "/app/model_repository",
    "MT_STATE_DIR": "/var/lib/mtserve",
}
PER_SERVICE = {"MT_PROVIDERS"}  # set by each compose service (cuda / cpu)


def env_default(value: object) -> str:
    """A Settings default as the MT_* string that parses back to it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def expected_compose_environment() -> dict[str, str]:
    """What docker-compose.yml's x-mt-environment must hold: every setting, the caller's value or the default."""
    expected = {}
    for env, default in setting_defaults().items():
        if env in PER_SERVICE:
            continue
        if env in CONTAINER_FIXED:
            expected[env] = CONTAINER_FIXED[env]
            continue
        expected[env] = f"${{{env}:-{env_default(default)}}}"
    return expected
