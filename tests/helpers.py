"""Helpers shared by the test areas: `from tests.helpers import require`."""
import os
import socket

import pytest


def require(condition: bool, reason: str) -> None:
    """Skip outside CI when a real part is missing; in CI a missing part is a failure."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"required part missing in CI: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (for the test daemons)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
