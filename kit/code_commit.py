"""The git commit the kit and gan3d run from: asked of git in a checkout, else read from the record
an image build leaves in the package (`RECORD`), else unknown with the reason.

The kit and gan3d ship together (one wheel), so one commit names both. An installed wheel
carries no .git: a wheel built from a checkout carries `RECORD`, which setup.py's build step writes
with `record_commit` into the build tree (`make wheelhouse`, `pip wheel .`), and `kit image build`
into its staged context, so an install or an image still names its commit (and whether the tree
had uncommitted changes). Never fatal: a results record says null and why.
"""

from __future__ import annotations

import json
import os
import subprocess
from importlib import resources
from pathlib import Path

from kit.atomic import atomic_write_text
from kit.boundedrun import run_bounded
from kit.errors import KitError
from kit.excerpt import one_line
from kit.readfile import read_json

# inside the kit package of a staged build context, and so of its wheel
RECORD = "build_commit.json"
FORMAT = "kit-build-commit/1"
GIT_TIMEOUT_S = 10  # a hung network filesystem must not hold a run
# bytes kept of git's stdout and stderr: a commit, or whether anything changed
GIT_OUTPUT = 64 << 10


def _installed() -> Path:
    """The kit package as imported (a checkout's kit/, or site-packages/kit of a wheel)."""
    return Path(str(resources.files("kit")))


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # the tree's own repository
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    ran = run_bounded(["git", *args], cwd=cwd, env=env, timeout=GIT_TIMEOUT_S, limit=GIT_OUTPUT)
    return subprocess.CompletedProcess(["git", *args], ran.returncode, ran.out, ran.err)


def from_checkout(package_dir: Path) -> tuple[str | None, str]:
    """(HEAD, "git checkout at DIR[ with uncommitted changes]"), or (None, why not)."""
    try:
        # The package's own file must be tracked: a venv inside
        # some other repository is not a checkout of it.
        tracked = _git(["ls-files", "--error-unmatch", "--", "__init__.py"], package_dir)
        if tracked.returncode != 0:
            return (
                None,
                f"not a git checkout ({one_line(tracked.stderr.strip(), 200) or 'not tracked'})",
            )
        head = _git(["rev-parse", "--verify", "HEAD"], package_dir)
        status = _git(
            ["status", "--porcelain", "--untracked-files=no", "--", "."], package_dir.parent
        )
    except FileNotFoundError:
        return None, "no git program on PATH to ask"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"git failed ({one_line(str(exc), 200)})"
    if head.returncode != 0:
        return None, f"git has no HEAD ({one_line(head.stderr.strip(), 200)})"
    changed = (
        " (whether it has uncommitted changes is unknown: git status failed)"
        if status.returncode != 0
        else " with uncommitted changes"
        if status.stdout.strip()
        else ""
    )
    return head.stdout.strip(), f"git checkout at {package_dir.parent}{changed}"


def source_commit(package_dir: Path | None = None) -> dict:
    """{"git_commit": sha or None, "git_commit_basis": where it was found, or why it is unknown}."""
    package_dir = package_dir or _installed()
    commit, basis = from_checkout(package_dir)
    if commit:
        return {"git_commit": commit, "git_commit_basis": basis}
    record = package_dir / RECORD
    if not record.exists():
        return {
            "git_commit": None,
            "git_commit_basis": f"unknown: {basis}, and no commit recorded at build time",
        }
    try:
        found = read_json(
            record,
            "build commit record",
            "rebuild the image with `kit image build`",
            limit=4096,
        )
        if not (
            isinstance(found, dict)
            and found.get("format") == FORMAT
            and isinstance(found.get("git_commit"), str)
            and isinstance(found.get("git_commit_basis"), str)
        ):
            raise KitError(
                f"not a build commit record (format {FORMAT!r})",
                fix="rebuild the image with `kit image build`",
                where=str(record),
            )
    except KitError as exc:
        return {"git_commit": None, "git_commit_basis": f"unknown: {one_line(str(exc), 200)}"}
    return {
        "git_commit": found["git_commit"],
        "git_commit_basis": f"recorded at build time: {one_line(found['git_commit_basis'], 300)}",
    }


def record_commit(staged_package: Path, source_package: Path | None = None) -> dict:
    """Write the source's commit into a staged or built copy of the package (an image build's
    context, a wheel's build tree), if known; returns it. A record already in the source (a wheel
    built from a staged context) is copied by the staging itself and kept."""
    commit, basis = from_checkout(source_package or _installed())
    if commit:
        atomic_write_text(
            staged_package / RECORD,
            json.dumps(
                {"format": FORMAT, "git_commit": commit, "git_commit_basis": basis}, indent=2
            )
            + "\n",
        )
    return {"git_commit": commit, "git_commit_basis": basis}
