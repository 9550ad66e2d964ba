"""scripts/setup.sh states what it needs and fails with one line naming the missing piece."""

from __future__ import annotations

import os

import pytest

from tests.support.installs import floor_python, run
from tests.support.paths import REPO


@pytest.mark.parametrize(
    "python, says",
    [
        ("/nonexistent/python3.11", "no /nonexistent/python3.11 on PATH; fix:"),
        (
            "floor",
            "the set-up needs 3.11 (TensorFlow 2.15.1); fix: rerun with PYTHON=/path/to/python3.11",
        ),
    ],
)
def test_setup_without_a_usable_python_says_so_in_one_line_and_makes_nothing(
    python, says, tmp_path
):
    if python == "floor":
        python = floor_python()
        if (
            run([python, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"]).stdout.strip()
            == "True"
        ):
            pytest.skip("no Python other than 3.11 on this machine")
    venv = tmp_path / "venv"
    env = {
        **os.environ,
        "PYTHON": python,
        "KIT_VENV": str(venv),
        "KIT_CACHE": str(tmp_path / "cache"),
    }
    done = run(["bash", str(REPO / "scripts" / "setup.sh")], env=env, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        done.stderr.count("\n") == 1 and done.stderr.startswith("setup: ") and says in done.stderr
    ), done.stderr
    assert not venv.exists()
