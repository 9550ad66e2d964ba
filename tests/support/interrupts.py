"""For the tests that interrupt the kit's commands with real signals: the environment of the
process they stop, and the processes that carry a run's tag."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tests.support.paths import REPO


def signalled_env(**more: str) -> dict:
    # TMPDIR: the run's own (tests/conftest.py): what a stopped process leaves goes with the run
    return dict(
        os.environ,
        PYTHONPATH=str(REPO),
        TF_CPP_MIN_LOG_LEVEL="2",
        TMPDIR=tempfile.gettempdir(),
        **more,
    )  # TensorFlow's start-up notes


def tagged(tag: str) -> list[int]:
    """Processes whose environment carries TAG: the run's own and any child it started."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag.encode() in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids
