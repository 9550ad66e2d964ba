"""The test run's temporary files: removed as the user who ran it, and what it left checked.

An ordinary user's rootless buildah or podman writes its storage inside a user namespace, as the
user's subordinate ids: the user cannot remove those files, only the tool's own namespace can
(`buildah unshare rm -rf`). Without XDG_RUNTIME_DIR, both tools make `podman-run-UID` and
`containers-user-UID` in the system's temporary directory; a run points it at its own directory,
but buildah's RUN step starts with the image's environment and makes them there all the same: the
run removes them at its end when they were not there at its start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from kit import atomic

# What the suite's programs are known to make in the system's temporary directory: TensorFlow's
# AutoGraph modules, a stopped gan3d's private directory (kit.scratch), a test run's own directory
# (kit-tests-PID-...), the kit's and the tests' temporary directories (kit-check-..., kit-pair-...),
# and rootless buildah/podman's runtime and temporary directories. Other programs on the machine
# may add entries of their own: those are not the run's to judge.
LITTER = re.compile(
    r"__autograph_generated_file\w*\.py|(?:gan3d|kit-tests)-(?P<pid>\d+)-\w+"
    r"|kit-[a-z]+-[a-z0-9_]{8}|podman-run-\d+|containers-user-\d+|storage-run-\d+|buildah\d+"
)
UNSHARE_TIMEOUT = 120  # seconds for `buildah unshare rm -rf` of one run's files


def system_tmp() -> str:
    """The system's temporary directory as tempfile finds it, whatever the run set tempfile's to."""
    return next((os.environ[v] for v in ("TMPDIR", "TEMP", "TMP") if os.environ.get(v)), "/tmp")


def run_dir_name_prefix() -> str:
    """The prefix of this process's run directory: its pid tells a live run's from a left one."""
    return f"kit-tests-{os.getpid()}-"


def litter(directory: str) -> dict[str, int | None]:
    """The entries of ``directory`` the suite's programs make, this user's only, each with the pid
    its name gives (None where the name gives none)."""
    found: dict[str, int | None] = {}
    for entry in os.scandir(directory):
        match = LITTER.fullmatch(entry.name)
        if not match:
            continue
        try:
            mine = entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:  # removed meanwhile
            continue
        if mine:
            found[entry.name] = int(match["pid"]) if match["pid"] else None
    return found


def left_behind(directory: str, before: set[str]) -> list[str]:
    """What the run left in ``directory``: litter that was not there at its start, except the
    directories of processes still running (a gan3d started meanwhile) and those of other test
    runs (each judges its own, and keeps it for a look when a test failed)."""
    own_run = run_dir_name_prefix()
    return sorted(
        name
        for name, pid in litter(directory).items()
        if name not in before
        and (not name.startswith("kit-tests-") or name.startswith(own_run))
        and (pid is None or pid == os.getpid() or not os.path.exists(f"/proc/{pid}"))
    )


def remove_tree(path: str | os.PathLike) -> bool:
    """Remove ``path`` as the user running the tests; what rootless buildah or podman made there
    as subordinate ids is removed inside their user namespace. True when nothing is left."""
    with contextlib.suppress(OSError):  # what the user cannot remove is handled below
        atomic.remove_tree(path)  # read-only directories of an image included
    if not os.path.lexists(path):
        return True
    tool = next((t for t in ("buildah", "podman") if shutil.which(t)), None)
    if tool and os.geteuid() != 0:
        runtime = Path(path, ".unshare-runtime")  # the tool's own, removed with the rest
        runtime.mkdir(mode=0o700, exist_ok=True)
        subprocess.run(
            [tool, "unshare", "rm", "-rf", "--", str(path)],
            capture_output=True,
            timeout=UNSHARE_TIMEOUT,
            check=False,
            env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        )
    return not os.path.lexists(path)


def remove_tool_runtime_dirs(directory: str, before: set[str]) -> None:
    """Remove the runtime directories rootless buildah and podman made in ``directory`` during
    the run (their RUN steps ignore XDG_RUNTIME_DIR); those there at its start are left."""
    for name in (f"podman-run-{os.getuid()}", f"containers-user-{os.getuid()}"):
        if name not in before and os.path.isdir(os.path.join(directory, name)):
            remove_tree(os.path.join(directory, name))


def private_runtime_dir(run_dir: str) -> str:
    """XDG_RUNTIME_DIR for the run's buildah and podman (mode 0700, as the tools want it)."""
    path = Path(run_dir, "xdg-runtime")
    path.mkdir(mode=0o700)
    return str(path)
