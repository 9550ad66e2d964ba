"""The real parts a test needs (daemons, tools, images): missing ones skip the test, or fail it in
CI, where every part is installed."""

from __future__ import annotations

import os

import pytest


def require(condition: bool, reason: str) -> None:
    """Skip outside CI when a real part is missing; in CI a missing part is a failure."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"required part missing in CI: {reason}")
    pytest.skip(reason)
