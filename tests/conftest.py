"""Generic fixtures shared by every test package."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
