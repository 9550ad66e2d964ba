"""The kit's own wheel (`make wheelhouse` builds it with `pip wheel`) names the git commit it was
built from: setup.py's build step writes kit/build_commit.json into the build, so a site's install,
with no checkout, prints it in `kit --version` and gan3d train records it in the results. Real git,
a real clone, a real wheel installed into a new venv with no network, run outside any checkout."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from kit.code_commit import RECORD
from tests.support.installs import outside_env, run
from tests.support.parts import require
from tests.support.paths import REPO


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _wheel(source: Path, wheels: Path) -> Path:
    """`pip wheel` as wheelhouse.sh runs it, without build isolation (no network here)."""
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheels),
            str(source),
        ],
        env=outside_env(),
    )
    assert done.returncode == 0, done.stderr
    [wheel] = wheels.glob("secure_site_kit-*.whl")
    return wheel


def _venv_with(wheel: Path, venv: Path) -> None:
    """A new venv without pip holding the kit's wheel alone (its dependencies come from this venv's
    site-packages on PYTHONPATH, where no .pth file runs: not this checkout's editable install)."""
    assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        env=outside_env(),
    )
    assert done.returncode == 0, done.stderr


def test_a_wheel_built_from_a_clone_names_its_commit_and_dirty_tree_when_installed_elsewhere(
    tmp_path,
):
    require(shutil.which("git") is not None, "git (apt-get install git)")
    head = _git("-C", str(REPO), "rev-parse", "HEAD")
    clone = tmp_path / "clone"
    _git("clone", "-q", "--no-checkout", str(REPO), str(clone))
    _git("-C", str(clone), "checkout", "-q", head)
    clean = _wheel(clone, tmp_path / "clean")
    assert not (clone / "kit" / RECORD).exists()  # written into the build, not the source
    (clone / "kit" / "errors.py").write_text(
        (clone / "kit" / "errors.py").read_text() + "# edited\n"
    )
    dirty = _wheel(clone, tmp_path / "dirty")
    with zipfile.ZipFile(clean) as a, zipfile.ZipFile(dirty) as b:
        records = [json.loads(w.read(f"kit/{RECORD}")) for w in (a, b)]
    assert [r["git_commit"] for r in records] == [head, head]
    assert records[0]["git_commit_basis"] == f"git checkout at {clone}"
    assert records[1]["git_commit_basis"] == f"git checkout at {clone} with uncommitted changes"

    venv, work = tmp_path / "venv", tmp_path / "elsewhere"
    work.mkdir()
    _venv_with(dirty, venv)
    libs = ":".join(p for p in sys.path if p.endswith("site-packages"))
    env = outside_env(PYTHONPATH=libs)
    shown = run([str(venv / "bin" / "kit"), "--version"], cwd=work, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1] == (
        f"commit {head}: recorded at build time: git checkout at {clone} with uncommitted changes"
    )

    results = work / "r.json"
    train = run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "gan3d",
            "train",
            "--synthetic",
            "32",
            "--test-fraction",
            "0.25",
            "--preset",
            "tiny",
            "--batch-size",
            "4",
            "--epochs",
            "1",
            "--steps-per-epoch",
            "1",
            "--validation-steps",
            "1",
            "--threads",
            "1",
            "--results",
            str(results),
        ],
        cwd=work,
        env=env,
    )
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-2000:]
    record = json.loads(results.read_text())
    assert record["git_commit"] == head and record["git_commit_basis"].startswith(
        "recorded at build time: "
    )
    assert record["git_commit_basis"].endswith("with uncommitted changes")
