"""Compare an unpacked tree with the converter's output, allowing only Charliecloud's rules."""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from pathlib import Path

CH_FILES = {"ch", "ch/environment", "ch/metadata.json"}


def snapshot(root: Path) -> dict[str, tuple]:
    """rel path -> (type, mode, symlink target or content sha256); never follows symlinks."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", None, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", mode, None)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("f", mode, hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                out[rel] = ("other", mode, None)
    return out


def charliecloud_view(
    reference: dict[str, tuple], devices: set[str] = frozenset()
) -> dict[str, tuple]:
    """What Charliecloud's rules make of a reference unpack (umoci raw unpack --rootless).

    ``devices``: paths that were device nodes in the layers (a rootless unpack turns them
    into empty regular files, so the reference cannot tell).
    """
    out = {}
    for rel, (kind, mode, extra) in reference.items():
        if rel.startswith("dev/") or kind == "other" or rel in devices:
            continue  # devices, FIFOs and anything under /dev are dropped
        if kind == "l":
            if extra.startswith("/"):
                target = posixpath.normpath("/" + extra.lstrip("/"))
                extra = posixpath.relpath(target, "/" + posixpath.dirname(rel))
            out[rel] = (kind, None, extra)
            continue
        mode &= ~0o6000  # setuid/setgid stripped
        mode |= 0o700 if kind == "d" else 0o600
        out[rel] = (kind, mode, extra)
    return out


def without_additions(converted: dict[str, tuple], mount_points: list[str]) -> dict[str, tuple]:
    """The converted tree minus what conversion adds (ch/ metadata, created mount points)."""
    added = CH_FILES | {m.lstrip("/") for m in mount_points}
    return {k: v for k, v in converted.items() if k not in added}


def diff(expected: dict, actual: dict) -> list[str]:
    """Human-readable differences, empty when equal."""
    lines = []
    for key in sorted(set(expected) | set(actual)):
        if expected.get(key) != actual.get(key):
            lines.append(f"{key}: expected {expected.get(key)}, got {actual.get(key)}")
    return lines
