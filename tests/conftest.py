"""Generic fixtures shared by every test package: free ports, the tiny trained bundle, a live server."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from live_server import LiveServer
from tiny_bundle import ATTENTION_VARIANTS, cached_tiny_bundle, write_corpus


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """The machine has 2 cores and other work running: PyTorch code in every test uses one intra-op thread."""
    import torch  # the dev environment always has it; imported here so collecting tests stays light

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_model_dir(request, tmp_path_factory) -> Path:
    """Folder with ``repository/de-en/1`` (the exported tiny bundle) and ``release/`` (its PyTorch weights).

    Built once per source digest under pytest's cache (about 20 s), then copied for this session.
    """
    cache_root = Path(request.config.cache.mkdir("mtserve"))
    target = tmp_path_factory.mktemp("tiny")
    cached_tiny_bundle(cache_root, target)
    return target


@pytest.fixture(scope="session", params=sorted(ATTENTION_VARIANTS))
def attention_variant_dir(request, tmp_path_factory) -> Path:
    """Like ``tiny_model_dir``, for one attention variant (fp32 only): ``repository/de-en/1`` and ``release/``."""
    cache_root = Path(request.config.cache.mkdir("mtserve"))
    target = tmp_path_factory.mktemp(request.param)
    cached_tiny_bundle(cache_root, target, model_overrides=ATTENTION_VARIANTS[request.param])
    return target


@pytest.fixture(scope="session")
def tiny_repository(tiny_model_dir) -> Path:
    """A model repository holding the tiny de-en bundle (version 1)."""
    return tiny_model_dir / "repository"


@pytest.fixture(scope="session")
def tiny_bundle_dir(tiny_repository) -> Path:
    return tiny_repository / "de-en" / "1"


@pytest.fixture(scope="session")
def shortlisted(tiny_bundle_dir, tmp_path_factory):
    """A copy of the tiny bundle with a shortlist learned from its own training corpus (read only: tests copy it
    before changing anything)."""
    from export.cli import main as export_main

    work = tmp_path_factory.mktemp("shortlist")
    bundle = work / "de-en" / "1"
    shutil.copytree(tiny_bundle_dir, bundle)
    corpus = write_corpus(work / "corpus")
    code = export_main(["shortlist", "--bundle", str(bundle), "--data", str(corpus), "--frequent", "8"])
    assert code == 0
    return bundle


@pytest.fixture(scope="session")
def shipped_models(tmp_path_factory):
    """The service as `make serve` starts it: every model of the shipped model_repository (de-en, zh-en)."""
    root = tmp_path_factory.mktemp("shipped-models")
    repository = Path(__file__).resolve().parent.parent / "model_repository"
    with LiveServer(repository, log_path=root / "service.log").start(timeout=240) as server:
        yield server


@pytest.fixture(scope="session")
def live_server(tiny_repository, tmp_path_factory):
    """The real service on a free loopback port, serving the tiny bundle; shared by the session."""
    log_path = tmp_path_factory.mktemp("server") / "service.log"
    server = LiveServer(tiny_repository, env={"MT_MAX_WAIT_MS": "10"}, log_path=log_path).start()
    yield server
    server.stop()
