"""The remote installer's command line (remote_script.py install), as the site runs it."""

from __future__ import annotations

import contextlib
import hashlib
import io
import sys
from pathlib import Path

from kit.transfer import remote_script
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


def call(argv: list[str]) -> tuple[int, str]:
    """remote_script.main in this process: (exit code, stderr); any other exception fails the
    test.
    """
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            remote_script.main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()
