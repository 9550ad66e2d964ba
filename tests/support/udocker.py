"""udocker's tests as an ordinary user (udocker refuses root): setpriv's words for `nobody`, and a
`udocker` command that runs udocker from this venv's packages under a Python that user may run."""

from __future__ import annotations

from pathlib import Path

USER = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
# The packages go on sys.path inside: PYTHONPATH is left as the caller set it, and udocker run
# --hostenv gives it to the ranks (a job's PYTHONPATH reaches its Python).
SHIM = """#!/bin/sh
exec {python} -c 'import sys; sys.path[:0] = "{path}".split(":"); \\
from udocker.maincmd import main; sys.argv[0] = "udocker"; sys.exit(main())' "$@"
"""


def write_shim(path: Path, python: str, packages: str) -> Path:
    """``path``, mode 0755: udocker from ``packages`` (':'-separated) under ``python``."""
    path.write_text(SHIM.format(path=packages, python=python))
    path.chmod(0o755)
    return path
