"""The oldest Python 3 on this machine: the remote side of kit transfer runs on a site's stock
python3, 3.6 and up, and the tests run it there too."""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path


def oldest_python3() -> str | None:
    """The oldest Python 3 (3.6 or 3.7) on this machine: on PATH or under pyenv."""
    for version in ("3.6", "3.7"):
        found = [shutil.which(f"python{version}") or ""]
        found += sorted(glob.glob(str(Path.home() / f".pyenv/versions/{version}*/bin/python3")))
        for python in filter(None, found):
            done = subprocess.run([python, "-c", "pass"], capture_output=True, timeout=60)
            if done.returncode == 0:
                return python
    return None
