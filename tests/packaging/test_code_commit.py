"""The commit a result names (kit.code_commit): a checkout's HEAD, the record `kit image build`
stages into the wheel, or null and why. Real git and a real wheel built from a staged context,
installed outside the checkout (the image's build stage does the same)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile

import pytest

from kit.code_commit import RECORD, source_commit
from tests.support.installs import outside_env, run
from tests.support.parts import require
from tests.support.paths import REPO


def _package(tmp_path):
    package = tmp_path / "kit"
    package.mkdir()
    (package / "__init__.py").write_text("")
    return package


def _git(tmp_path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_outside_a_checkout_the_commit_is_null_with_the_reason(tmp_path):
    found = source_commit(_package(tmp_path))
    assert found["git_commit"] is None
    assert found["git_commit_basis"].startswith("unknown: not a git checkout")
    assert found["git_commit_basis"].endswith("and no commit recorded at build time")


def test_a_checkout_names_its_head_and_uncommitted_changes(tmp_path):
    require(shutil.which("git") is not None, "git (apt-get install git)")
    package = _package(tmp_path)
    _git(tmp_path, "init", "-q")
    assert (
        source_commit(package)["git_commit"] is None
    )  # in a repository but not tracked: not a checkout of it
    _git(tmp_path, "add", "kit/__init__.py")
    _git(tmp_path, "commit", "-q", "-m", "x")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert source_commit(package) == {
        "git_commit": head,
        "git_commit_basis": f"git checkout at {tmp_path}",
    }
    (package / "__init__.py").write_text("changed = True\n")
    assert (
        source_commit(package)["git_commit_basis"]
        == f"git checkout at {tmp_path} with uncommitted changes"
    )


@pytest.mark.parametrize(
    "text",
    [
        '{"git_commit": 7}',
        '{"git_commit": "c", "git_commit_basis": "b"}',
        '{"format": "kit-build-commit/1", "git_commit": 7, "git_commit_basis": "b"}',
        '{"format": "kit-build-commit/1",',
    ],
)
def test_a_damaged_record_is_unknown_not_fatal(tmp_path, text):
    package = _package(tmp_path)
    (package / RECORD).write_text(text)
    found = source_commit(package)
    assert found["git_commit"] is None and found["git_commit_basis"].startswith(
        f"unknown: {package / RECORD}"
    )


def test_an_image_built_from_this_checkout_names_its_commit(tmp_path):
    """stage_context records HEAD; the wheel the recipe builds from the context carries it; installed
    outside any checkout, the kit reads it back."""
    require(shutil.which("git") is not None, "git (apt-get install git)")
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    require(head.returncode == 0, f"{REPO} to be a git checkout")
    from kit.image.build import stage_context

    context = stage_context(tmp_path / "context")
    wheels, target = tmp_path / "wheels", tmp_path / "site-packages"
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
            str(context),
        ],
        env=outside_env(),
    )
    assert done.returncode == 0, done.stderr
    [wheel] = wheels.glob("secure_site_kit-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        recorded = json.loads(whl.read(f"kit/{RECORD}"))
    assert (
        recorded["format"] == "kit-build-commit/1" and recorded["git_commit"] == head.stdout.strip()
    )
    assert recorded["git_commit_basis"].startswith(f"git checkout at {REPO}")
    done = run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        env=outside_env(),
    )
    assert done.returncode == 0, done.stderr
    libs = ":".join(p for p in sys.path if p.endswith("site-packages"))
    probe = (
        "import json; from kit.code_commit import source_commit; print(json.dumps(source_commit()))"
    )
    inside = run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=outside_env(PYTHONPATH=f"{target}:{libs}")
    )
    assert inside.returncode == 0, inside.stderr
    assert json.loads(inside.stdout) == {
        "git_commit": head.stdout.strip(),
        "git_commit_basis": "recorded at build time: " + recorded["git_commit_basis"],
    }
