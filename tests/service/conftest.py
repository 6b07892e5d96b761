"""Fixtures of the HTTP tests: a client of the shared live server and the tiny bundle's manifest."""

from __future__ import annotations

import json

import httpx
import pytest


@pytest.fixture(scope="session")
def api(live_server):
    with httpx.Client(base_url=live_server.url, timeout=60.0) as client:
        yield client


@pytest.fixture(scope="session")
def manifest(tiny_bundle_dir) -> dict:
    return json.loads((tiny_bundle_dir / "manifest.json").read_text())
