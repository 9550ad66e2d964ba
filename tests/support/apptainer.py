"""A real Apptainer for the tests: the one scripts/apptainer.sh puts into the kit's cache, or
one on PATH. Where the set-up could not install one, the tests skip with the reason it recorded
(the optional step never fails a set-up, in CI either)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kit.cachedir import kit_cache
from tests.support.parts import require

CACHE = kit_cache()  # where scripts/apptainer.sh installs it
INSTALLED = CACHE / "apptainer/usr/bin/apptainer"
UNAVAILABLE = CACHE / "apptainer.unavailable"  # scripts/apptainer.sh: why there is none


def found() -> Path | None:
    """The apptainer executable, None where there is none (a test that runs it only in part)."""
    if INSTALLED.is_file() and os.access(INSTALLED, os.X_OK):
        return INSTALLED
    on_path = shutil.which("apptainer")
    return Path(on_path) if on_path else None


def apptainer() -> Path:
    """The apptainer executable, or skip naming why there is none."""
    there = found()
    if there:
        return there
    if UNAVAILABLE.is_file():
        pytest.skip(f"no real Apptainer: {UNAVAILABLE.read_text(errors='replace').strip()[:300]}")
    require(False, "no real Apptainer: run scripts/apptainer.sh (scripts/setup.sh does)")
    raise AssertionError("unreachable")  # require() skipped or failed


def copied(dest: Path) -> Path:
    """The cached Apptainer copied to DEST (new, readable by all) for an ordinary user, who may not
    enter root's home: its two programs re-pointed with patchelf at the copy's own loader and C
    library (scripts/apptainer.sh pointed them at the cache's). Returns the copy's apptainer."""
    require(INSTALLED.is_file(), f"no cached Apptainer at {INSTALLED} (scripts/apptainer.sh)")
    require(shutil.which("patchelf") is not None, "patchelf (apt-get install patchelf)")
    root = INSTALLED.parents[2]
    shutil.copytree(root, dest, symlinks=True)
    libs = dest / "usr/lib/kit-glibc"
    for program in (dest / "usr/bin/apptainer", *dest.glob("usr/lib/*/apptainer/bin/starter")):
        subprocess.run(
            ["patchelf", "--set-interpreter", str(libs / "ld-linux-x86-64.so.2")]
            + ["--set-rpath", str(libs), str(program)],
            check=True,
            capture_output=True,
            timeout=60,
        )
    return dest / "usr/bin/apptainer"


def run(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``apptainer ARGS`` with its output captured."""
    return subprocess.run(
        [str(apptainer()), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )
