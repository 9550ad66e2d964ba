"""A real Apptainer for the tests: the one scripts/apptainer.sh puts into the kit's cache, or
one on PATH. Where the set-up could not install one, the tests skip with the reason it recorded
(the optional step never fails a set-up, in CI either)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.parts import require

CACHE = Path(os.environ.get("KIT_CACHE", Path.home() / ".cache/secure-site-kit"))
INSTALLED = CACHE / "apptainer/usr/bin/apptainer"
UNAVAILABLE = CACHE / "apptainer.unavailable"  # scripts/apptainer.sh: why there is none


def apptainer() -> Path:
    """The apptainer executable, or skip naming why there is none."""
    if INSTALLED.is_file() and os.access(INSTALLED, os.X_OK):
        return INSTALLED
    found = shutil.which("apptainer")
    if found:
        return Path(found)
    if UNAVAILABLE.is_file():
        pytest.skip(f"no real Apptainer: {UNAVAILABLE.read_text(errors='replace').strip()[:300]}")
    require(False, "no real Apptainer: run scripts/apptainer.sh (scripts/setup.sh does)")
    raise AssertionError("unreachable")  # require() skipped or failed


def run(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``apptainer ARGS`` with its output captured."""
    return subprocess.run(
        [str(apptainer()), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )
