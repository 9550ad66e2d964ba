"""Cached Debian root filesystems and images for tests (real packages via mmdebstrap).

A root filesystem is built once per (suite, variant, package list) into
~/.cache/secure-site-kit/rootfs/ (override with $KIT_TEST_CACHE) and reused by later runs and
by other test areas. Builds hold a lock so parallel sessions do not build the same tree twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

CACHE = Path(os.environ.get("KIT_TEST_CACHE", "~/.cache/secure-site-kit")).expanduser()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(path.suffix + ".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def rootfs_key(packages: list[str], suite: str = "bookworm", variant: str = "apt") -> str:
    text = f"{suite}\n{variant}\n" + "\n".join(sorted(set(packages)))
    return f"{suite}-{variant}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def debian_rootfs_tar(packages: list[str], suite: str = "bookworm", variant: str = "apt") -> Path:
    """A tarball of a Debian tree with ``packages`` installed (built by mmdebstrap once)."""
    out = CACHE / "rootfs" / f"{rootfs_key(packages, suite, variant)}.tar"
    with _locked(out):
        if out.exists():
            return out
        part = out.with_name(out.stem + ".part.tar")  # mmdebstrap picks the format from the suffix
        cmd = [
            "mmdebstrap",
            "--quiet",
            f"--variant={variant}",
            "--include=" + ",".join(packages),
            "--dpkgopt=path-exclude=/usr/share/{doc,man,locale}/*",
            suite,
            str(part),
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        os.replace(part, out)
    return out


def debian_rootfs_dir(packages: list[str], suite: str = "bookworm", variant: str = "apt") -> Path:
    """The same tree unpacked into a cached directory (read-only use: copy before changing)."""
    tar = debian_rootfs_tar(packages, suite, variant)
    out = tar.with_suffix("")
    with _locked(out):
        if out.is_dir():
            return out
        part = out.with_name(out.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        subprocess.run(["tar", "-xf", str(tar), "-C", str(part), "--exclude=./dev/*"], check=True)
        os.replace(part, out)
    return out
