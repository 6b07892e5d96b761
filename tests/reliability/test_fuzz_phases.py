"""schemathesis's own command line, every phase (examples, coverage, fuzzing, stateful), on the live server's
/openapi.json: no 5xx but the documented 504 for a deadline already past (our ``no_server_error``, loaded as its
hooks), and the responses as documented. The coverage phase sends each field every type it does not take: it
found DeepL's ``split_sentences: {}`` 500 (issue 55) within seconds, which the seeded Hypothesis fuzzing of
test_fuzz_schema.py had missed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from reliability_helpers import SMALL_LIMITS, start_server

HERE = Path(__file__).resolve().parent
CHECKS = (
    "no_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
)


@pytest.fixture(scope="module")
def phases_server(tiny_repository, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("phases") / "service.log"
    env = {**SMALL_LIMITS, "MT_MAX_WAIT_MS": "1", "MT_STATE_DIR": str(log_path.parent / "state")}
    server = start_server(tiny_repository, env, log_path)
    yield server
    server.stop()


def test_schemathesis_every_phase_finds_no_server_error(phases_server, tmp_path):
    command = [
        sys.executable, "-m", "schemathesis.cli", "run", phases_server.url + "/openapi.json",
        "--phases", "examples,coverage,fuzzing,stateful", "--checks", ",".join(CHECKS),
        "--max-examples", os.environ.get("MT_FUZZ_EXAMPLES", "50"), "--seed", os.environ.get("MT_FUZZ_SEED", "55"),
        "--workers", "1", "--request-timeout", "30", "--no-color",
    ]  # fmt: skip
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "fuzz_checks", "PYTHONPATH": str(HERE)}
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=800)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-12000:]
    assert "Coverage" in report and "Stateful" in report, report[-4000:]
    assert phases_server.process.poll() is None, "the server died during the run"
