"""deploy/entrypoint.sh: the one command the container, compose and Kubernetes run.

The end-to-end test starts the real service through it exactly as the container does (only the
interpreter differs: PYTHON=<this interpreter>), serves the tiny bundle, and stops it with SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from deploy_helpers import ENTRYPOINT, ROOT, entrypoint_server, run, tool

SECRET = "s3cr3t-key-never-printed"


def test_entrypoint_is_executable_and_passes_shellcheck():
    assert os.access(ENTRYPOINT, os.X_OK), "the image's ENTRYPOINT runs the script directly"
    assert ENTRYPOINT.read_text().startswith("#!/usr/bin/env bash\n")
    checker = tool("shellcheck")
    if checker is None:
        pytest.skip("shellcheck is not installed (scripts/install-test-tools.sh installs it)")
    result = run([checker, str(ENTRYPOINT)])
    assert result.returncode == 0, result.stdout


def _fake_python(tmp_path: Path) -> Path:
    """Stands in for the interpreter: runs the settings echo for real, reports the exec instead of serving."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = "-m" ]; then echo "EXEC pid=$$ cwd=$PWD args=$*"; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    return fake


def _json_lines(out: str) -> list[dict]:
    """The entry script's lines (the fake interpreter's EXEC line aside): each must be one JSON object in
    the service's log shape (service/observability/logs.py), so a log collector parses the container's log from line
    one."""
    entries = [json.loads(line) for line in out.splitlines() if not line.startswith("EXEC ")]
    for entry in entries:
        assert list(entry)[:4] == ["time", "level", "logger", "message"] and entry["logger"] == "entrypoint", entry
    return entries


def test_entrypoint_logs_effective_settings_as_json_hides_secrets_and_execs(tmp_path):
    env = {
        **os.environ,
        "PYTHON": str(_fake_python(tmp_path)),
        "MT_PORT": "8123",
        "MT_MAX_BATCH_TOKENS": "777",
        "MT_GLOSSARIES_PER_KEY": "7",
        "MT_API_KEYS": f"{SECRET},another-{SECRET}",
        "MT_REDIS_URL": f"redis://:{SECRET}@redis:6379/0",
    }
    # Started from another folder: the script must find the repository by itself.
    proc = subprocess.Popen(
        ["bash", str(ENTRYPOINT)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert SECRET not in out
    entries = _json_lines(out)
    settings = [e["settings"] for e in entries if e["message"] == "effective settings (service.settings)"]
    assert len(settings) == 1, out
    shown = settings[0]
    assert shown["MT_API_KEYS"] == "<2 configured, hidden>"
    assert shown["MT_REDIS_URL"] == "redis://:<hidden>@redis:6379/0"  # where the server is, not its password
    assert shown["MT_PORT"] == 8123
    assert shown["MT_MAX_BATCH_TOKENS"] == 777  # a *_TOKENS limit is not a secret
    assert shown["MT_GLOSSARIES_PER_KEY"] == 7  # nor a count per key
    assert shown["MT_DRAIN_SECONDS"] == 20  # defaults are shown too, as the service resolves them
    assert entries[-1]["message"] == f"exec {env['PYTHON']} -m service"
    exec_lines = [line for line in out.splitlines() if line.startswith("EXEC ")]
    assert len(exec_lines) == 1, out
    # `exec`: the server runs in the very process the container runtime started (it gets SIGTERM).
    assert f"pid={proc.pid} " in exec_lines[0]
    assert f"cwd={ROOT} " in exec_lines[0] and exec_lines[0].endswith("args=-m service")


def test_entrypoint_still_starts_the_service_when_settings_are_invalid(tmp_path):
    env = {**os.environ, "PYTHON": str(_fake_python(tmp_path)), "MT_PORT": "not-a-port"}
    result = run(["bash", str(ENTRYPOINT)], env=env, cwd=tmp_path)
    assert result.returncode == 0
    errors = [e for e in _json_lines(result.stdout) if e["level"] == "error"]
    assert [e["message"].split(":")[0] for e in errors] == ["invalid setting MT_PORT"], result.stdout
    assert "EXEC " in result.stdout  # the server itself then refuses the configuration


def test_entrypoint_end_to_end_serves_translations_and_exits_zero_on_sigterm(tiny_repository, tmp_path):
    server = entrypoint_server(tiny_repository, tmp_path / "service.log", env={"MT_API_KEYS": SECRET})
    server.start(timeout=90)
    try:
        cmdline = Path(f"/proc/{server.process.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[:3] == [sys.executable.encode(), b"-m", b"service"], cmdline  # bash exec'd python
        headers = {"Authorization": f"Bearer {SECRET}"}
        for text in ("ein mann spielt", "der hund"):
            reply = httpx.post(server.url + "/v1/translate", json={"texts": [text]}, headers=headers, timeout=30)
            assert reply.status_code == 200, reply.text
            assert reply.json()["translations"][0]["text"].strip()
        assert httpx.post(server.url + "/v1/translate", json={"texts": ["x"]}, timeout=30).status_code == 401
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
        metrics = httpx.get(server.url + "/metrics", timeout=5).text
        assert 'mt_requests_total{endpoint="/v1/translate"' in metrics
    finally:
        code = server.stop(signal.SIGTERM, timeout=40)
    log = (tmp_path / "service.log").read_text(errors="replace")
    assert code == 0, log[-3000:]
    assert '"MT_PORT": ' in log and SECRET not in log


def test_refused_start_logs_json_only_and_exits_two(tmp_path):
    """The real interpreter this time: the service refuses MT_PORT=not-a-port itself, with a JSON line naming the
    setting instead of a traceback, so every line the container prints on a refused start parses too."""
    env = {**os.environ, "PYTHON": sys.executable, "MT_PORT": "not-a-port", "MT_API_KEYS": SECRET}
    result = run(["bash", str(ENTRYPOINT)], env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    entries = [json.loads(line) for line in lines]
    refusals = [e for e in entries if e["logger"] == "service"]
    assert [e["level"] for e in refusals] == ["error"] and "invalid setting MT_PORT" in refusals[0]["message"]
    assert SECRET not in result.stdout + result.stderr
