"""Suite-wide settings. Area fixtures live in tests/<area>/conftest.py."""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("USER", "root")  # ch-run refuses to start without $USER


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
