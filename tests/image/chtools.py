"""Run the real Charliecloud tools (ch-run, ch-convert) from tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.parts import require


def need(*tools: str) -> None:
    for tool in tools:
        require(shutil.which(tool) is not None, f"{tool} not installed (scripts/setup.sh)")


def ch_run(image: Path, *args: str, binds: tuple[str, ...] = (), opts: tuple[str, ...] = ()) -> str:
    """Run a command in a Charliecloud image with the real ch-run."""
    need("ch-run")
    cmd = ["ch-run", *opts] + [f"-b{b}" for b in binds] + [str(image), "--", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{cmd}: {proc.stderr}"
    return proc.stdout


def ch_convert(src: Path, out: Path, fmt: str | None = None) -> Path:
    need("ch-convert")
    cmd = ["ch-convert"] + (["-o", fmt] if fmt else []) + [str(src), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{cmd}: {proc.stderr}"
    return out
