"""Fixtures of the protocol tests: an httpx client of the shared live server and /v1's answers to compare with."""

from __future__ import annotations

import httpx
import pytest


@pytest.fixture(scope="session")
def api(live_server):
    with httpx.Client(base_url=live_server.url, timeout=60.0) as client:
        yield client


@pytest.fixture(scope="session")
def host(live_server) -> str:
    return live_server.url.removeprefix("http://")
