"""`make serve` listens where the README says: HOST / PORT, or the service's own MT_HOST / MT_PORT."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def serve_command(**env: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    inherited = ("HOST", "PORT", "MT_HOST", "MT_PORT", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")  # e.g. under `make test`
    clean = {k: v for k, v in os.environ.items() if k not in inherited}
    result = subprocess.run(
        ["make", "-n", "serve"], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.endswith("-m service")]
    return line


def test_defaults_and_both_spellings_of_host_and_port():
    assert "MT_HOST=127.0.0.1 MT_PORT=8000 " in serve_command()
    assert "MT_HOST=0.0.0.0 MT_PORT=8797 " in serve_command(MT_HOST="0.0.0.0", MT_PORT="8797")
    assert "MT_PORT=9000 " in serve_command(PORT="9000", MT_PORT="8797")  # PORT (make's own) wins
