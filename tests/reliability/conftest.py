"""Fixtures for the reliability tests: a real server with small limits (cheap requests, reachable limits)."""

from __future__ import annotations

import pytest
from fault_injection import COMMAND as FAULT_INJECTING_COMMAND
from reliability_helpers import SMALL_LIMITS, start_server


@pytest.fixture(scope="session")
def strict_server(tiny_repository, tmp_path_factory):
    """The service with small request limits and its batch runners wrapped by the fault injector
    (tests/fault_injection.py); its log is a file the tests read."""
    log_path = tmp_path_factory.mktemp("strict") / "service.log"
    env = {**SMALL_LIMITS, "MT_MAX_BODY_BYTES": "4096", "MT_MAX_WAIT_MS": "20"}
    server = start_server(tiny_repository, env, log_path, command=FAULT_INJECTING_COMMAND)
    yield server
    server.stop()
