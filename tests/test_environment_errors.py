"""What the machine refuses (a read-only output directory, a file where a directory is wanted, a
directory where a file is) ends a command in one line naming the path and the fix, exit 1: not
the last-resort handler's "internal error" (exit 70) that asks the user to report a bug.

Root ignores permissions, so the read-only cases run the real commands as `nobody` (setpriv).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kit import cli
from tests.support.parts import require

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def public_tmp():
    """A directory `nobody` may enter, holding a read-only `ro/` and a writable `rw/` of its own."""
    require(
        os.geteuid() == 0 and shutil.which("setpriv"), "needs root to switch to nobody (setpriv)"
    )
    base = Path(tempfile.mkdtemp(prefix="kit-envtest-", dir="/tmp"))
    base.chmod(0o755)
    (base / "ro").mkdir(mode=0o755)  # root's: nobody may read it, not write in it
    (base / "rw").mkdir()
    shutil.chown(base / "rw", "nobody")
    (base / "img.tar.gz").write_bytes(os.urandom(4096))
    (base / "img.tar.gz").chmod(0o644)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def as_nobody(base: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HOME": str(base / "rw"),
        "KIT_CRASH_DIR": str(base / "rw/crash"),
    }
    env.pop("KIT_DEBUG", None)
    done = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, *argv],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    require(
        "ModuleNotFoundError" not in done.stderr,
        f"nobody cannot run this venv's Python: {done.stderr[-200:]}",
    )
    return done


def one_line(done: subprocess.CompletedProcess, prefix: str) -> str:
    assert done.returncode == 1, done.stderr
    err = done.stderr
    assert err.count("\n") == 1 and err.startswith(prefix) and "internal error" not in err, err
    assert "; fix: " in err, err
    return err


@pytest.mark.parametrize(
    "argv, names",
    [
        (["transfer", "bundle", "img.tar.gz", "--dir", "ro/bundle"], "ro: cannot create "),
        (
            [
                "scale",
                "plan",
                "--site",
                "supermuc-ng",
                "--nodes",
                "1,2",
                "--ranks-per-node",
                "4",
                "--no-container",
                "--dir",
                "ro/sweep",
                "--",
                "--epochs",
                "1",
            ],
            "ro: cannot create sweep in it (Permission denied)",
        ),
        (["site", "probe", "--out", "ro/mine.yaml"], "ro: cannot create "),
    ],
)
def test_a_read_only_output_directory_is_one_line(public_tmp, argv, names):
    err = one_line(as_nobody(public_tmp, "-m", "kit", *argv), "kit: error: ")
    assert f"{public_tmp}/{names}" in err or f"kit: error: {names}" in err, err
    assert list((public_tmp / "ro").iterdir()) == []
    assert not (public_tmp / "rw/crash").exists()


def test_gan3d_into_a_read_only_directory_is_one_line(public_tmp):
    done = as_nobody(
        public_tmp,
        "-m",
        "gan3d",
        "simulate",
        "--out",
        "ro/sim",
        "--files",
        "1",
        "--events-per-file",
        "2",
    )
    err = one_line(done, "gan3d simulate: error: ")
    assert "ro: cannot create sim in it (Permission denied)" in err, err
    assert list((public_tmp / "ro").iterdir()) == []


@pytest.mark.parametrize(
    "out, expected",
    [
        (
            "{tmp}/file",
            "{tmp}/file: File exists; fix: something that is not a directory is at that path",
        ),
        (
            "{tmp}/file/sweep",
            "{tmp}/file/sweep: Not a directory; fix: a part of that path is a file",
        ),
    ],
)
def test_an_output_path_through_or_onto_the_wrong_kind_of_file_is_one_line(
    tmp_path, capsys, out, expected
):
    (tmp_path / "file").write_text("mine\n")
    argv = [
        "scale",
        "plan",
        "--site",
        "supermuc-ng",
        "--nodes",
        "1",
        "--ranks-per-node",
        "4",
        "--no-container",
        "--dir",
        out.format(tmp=tmp_path),
        "--",
        "--epochs",
        "1",
    ]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected.format(tmp=tmp_path) in err, err
    assert (tmp_path / "file").read_text() == "mine\n"
