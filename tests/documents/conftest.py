"""A live server for the document tests, with its own state directory (jobs and files) and small limits."""

from __future__ import annotations

import httpx
import pytest
from live_server import LiveServer

LIMITS = {"MT_MAX_DOCUMENT_BYTES": "200000", "MT_MAX_DOCUMENT_CHARS": "20000", "MT_MAX_DOCUMENT_PAGES": "20"}


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("documents-state")


@pytest.fixture(scope="module")
def doc_server(tiny_repository, state_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("documents-server") / "service.log"
    env = {"MT_MAX_WAIT_MS": "5", "MT_STATE_DIR": str(state_dir), **LIMITS}
    server = LiveServer(tiny_repository, env=env, log_path=log).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(doc_server):
    with httpx.Client(base_url=doc_server.url, timeout=60.0) as c:
        yield c
