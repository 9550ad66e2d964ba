"""Shower files for the study tests (the study files: tests/support/studies.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.showers import tiny_showers


@pytest.fixture(scope="session")
def showers(tmp_path_factory) -> list[Path]:
    return tiny_showers(tmp_path_factory.mktemp("showers"))
