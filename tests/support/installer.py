"""The remote installer's command line (remote_script.py install), as the site runs it."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from tests.support.receiver import SCRIPT


def sha12(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def install_argv(
    src: Path,
    images: Path,
    *extra: str,
    keep: str = "2",
    fmt: str = "dir",
    version: str | None = None,
) -> list[str]:
    return [
        sys.executable,
        str(SCRIPT),
        "install",
        str(src),
        str(images),
        "bb",
        version or sha12(src),
        keep,
        "0",
        fmt,
        *extra,
    ]
