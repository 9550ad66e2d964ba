"""A test run leaves nothing in the system's temporary directory, as root or as an ordinary user:
its own directory goes at its end, and what its programs left there fails the run, naming it.
The runs here are small pytest runs with this suite's conftest and a temporary directory of their
own as the system's (TMPDIR), so that other programs on the machine do not count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

INNER = '''
import os


def test_a_file_in_the_system_temporary_directory():
    name = os.environ.get("INNER_LITTER")
    if name:  # what a SIGKILLed TensorFlow process leaves, or a tool writing beside the run's directory
        open(os.path.join(os.environ["TMPDIR"], name), "w").close()
'''


def inner_run(tmp_path: Path, litter: str) -> tuple[subprocess.CompletedProcess, Path]:
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if k not in ("KIT_TEST_TMPDIR", "PYTEST_ADDOPTS")}
    path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
    env.update(TMPDIR=str(system_tmp), INNER_LITTER=litter, PYTHONPATH=path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", os.devnull, "-p", "tests.conftest"]
        + ["-p", "no:cacheprovider", "-p", "no:xdist", "--rootdir", str(tmp_path)]
        + [str(tmp_path / "test_inner.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    return done, system_tmp


def test_what_a_run_leaves_fails_it_by_name(tmp_path):
    done, system_tmp = inner_run(tmp_path, "__autograph_generated_filexyz.py")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"left in {system_tmp} by this run: 1 (__autograph_generated_filexyz.py); "
        "fix: the test that made them removes them"
    ) in done.stdout
    assert (
        "appeared while test_inner.py::test_a_file_in_the_system_temporary_directory ran: "
        "__autograph_generated_filexyz.py"
    ) in done.stdout
    # the run's own kit-tests-PID-* (its XDG_RUNTIME_DIR inside) is gone; the litter is left to see
    assert os.listdir(system_tmp) == ["__autograph_generated_filexyz.py"]
