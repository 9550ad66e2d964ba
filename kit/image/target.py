"""Decide, before any work, what OUT of ``kit image convert`` is and whether the kit may write it.

The kit never destroys what it did not make. OUT must be new, or an earlier kit output of the
same form, replaced only with --force. "Earlier kit output" is proven, not guessed from a name:
OUT.manifest.json records the output's identity (its inode, and its size for a file or the inode
of its ch/metadata.json for a directory), which a user's file or directory that merely sits
there cannot match. Sidecars found beside OUT must be the kit's own too, or they are refused.
Everything here only reads.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from kit.errors import KitError
from kit.image.writers import format_for
from kit.image_names import MANIFEST, PAIR, SHA256, SIDECARS, is_pair_document, is_sha256_file
from kit.readfile import read_bytes

WORK_TAG = ".kit-tmp."  # .OUT.kit-tmp.XXXXXXXX: the work directory of one run for OUT
LOCK_TAG = ".kit-lock"  # .OUT.kit-lock: held while a run writes OUT
STAGED = "staged"  # staged<suffix> in the work directory: the sidecars of the image being committed
MAX_SIDECAR = {SHA256: 4096, PAIR: 1 << 20, MANIFEST: 64 << 20}
NAME_MAX = 255 - len(WORK_TAG) - 9  # the work directory's name must fit too
Identity = dict


@dataclass(frozen=True)
class Target:
    """Where the output goes: ``parent`` resolved, ``name`` the entry in it."""

    src: Path
    out: Path  # as given: messages and the manifest use it
    parent: Path
    name: str
    fmt: str
    force: bool
    existing: Identity | None  # the identity of the earlier kit output being replaced
    pending: str | None  # a work directory whose staged sidecars describe OUT (commit interrupted)

    @property
    def path(self) -> Path:
        return self.parent / self.name

    def recheck(self) -> Target:
        """The same checks again (under the run's lock: OUT may have changed since)."""
        return plan(self.src, self.out, fmt=self.fmt, force=self.force)


def plan(src: str | os.PathLike, out: str | os.PathLike, *, fmt: str | None, force: bool) -> Target:
    """Check OUT against SRC and what is on disk; raise KitError (one line, nothing touched)."""
    src, out = Path(src), Path(out)
    name = out.name
    if name in ("", ".", ".."):
        raise KitError(
            f"{out}: OUT is '.', '..' or '/', a directory the kit did not make",
            fix="name a new image, e.g. img.sqfs or img/",
        )
    if len(name.encode()) > NAME_MAX:
        raise KitError(f"{out}: the name is longer than {NAME_MAX} bytes", fix="a shorter OUT name")
    fmt = format_for(out, fmt)
    parent = Path(os.path.realpath(out.parent))
    if parent.exists() and not parent.is_dir():
        raise KitError(f"{out}: {out.parent} is not a directory", fix="choose OUT in a directory")
    path = parent / name
    _check_overlap(src, out, path)
    existing = pending = None
    st = _lstat(path)
    if st is not None:
        existing, pending = _recognise(out, path, fmt, st)
        if not force:
            raise KitError(
                f"{out}: exists (an earlier kit image convert {fmt} output)",
                fix="pass --force to replace it, or choose another OUT",
            )
    for suffix in SIDECARS:
        _check_sidecar(Path(f"{path}{suffix}"), suffix, name)
    return Target(
        src=src,
        out=out,
        parent=parent,
        name=name,
        fmt=fmt,
        force=force,
        existing=existing,
        pending=pending,
    )


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _check_overlap(src: Path, out: Path, path: Path) -> None:
    """OUT must not be SRC, inside it or around it, nor the current directory or above it."""
    real_src = Path(os.path.realpath(src))
    try:
        cwd = Path(os.getcwd())
    except FileNotFoundError:
        cwd = None
    for where in (path, Path(os.path.realpath(path))):  # OUT itself, and where a link at OUT leads
        if where == real_src or _same_file(src, where):
            raise KitError(f"{out}: OUT is SRC itself", fix="write the image under another name")
        if real_src in where.parents:
            raise KitError(
                f"{out}: OUT is inside SRC {src}", fix="write the image outside the source"
            )
        if where in real_src.parents:
            raise KitError(f"{out}: OUT contains SRC {src}", fix="write the image elsewhere")
        if cwd is not None and (where == cwd or where in cwd.parents):
            raise KitError(
                f"{out}: OUT is the current directory or contains it", fix="name a new image"
            )


def _same_file(src: Path, path: Path) -> bool:
    try:
        a, b = os.stat(src), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def identity(path: Path, fmt: str) -> Identity | None:
    """What the manifest records to recognise this very output later (None: not one of ours)."""
    st = _lstat(path)
    if st is None:
        return None
    if fmt == "dir":
        meta = _lstat(path / "ch" / "metadata.json") if stat.S_ISDIR(st.st_mode) else None
        return {"inode": st.st_ino, "metadata_inode": meta.st_ino} if meta else None
    return {"inode": st.st_ino, "size": st.st_size} if stat.S_ISREG(st.st_mode) else None


def _recognise(out: Path, path: Path, fmt: str, st: os.stat_result) -> tuple[Identity, str | None]:
    """OUT exists: it must be an earlier kit output of this form, else refused."""
    kind = (
        "a symlink"
        if stat.S_ISLNK(st.st_mode)
        else ("a directory" if stat.S_ISDIR(st.st_mode) else "a file")
    )
    found = identity(path, fmt)
    if found is not None:
        manifest = read_manifest(Path(f"{path}{MANIFEST}"))
        if manifest and _describes(manifest, fmt, found):
            return found, None
        for work in work_dirs(path.parent, path.name):
            staged = read_manifest(path.parent / work / f"{STAGED}{MANIFEST}")
            if staged and _describes(staged, fmt, found):
                return found, work  # the image went in, its sidecars did not: finished next run
    raise KitError(
        f"{out}: "
        f"exists as {kind} that is not an earlier kit image convert {fmt} output (no "
        f"{path.name}{MANIFEST} describes it); the kit never replaces what it did not make",
        fix="choose another OUT, or move it away yourself",
    )


def _describes(manifest: dict, fmt: str, found: Identity) -> bool:
    output = manifest.get("output")
    return (
        isinstance(output, dict) and output.get("format") == fmt and output.get("identity") == found
    )


def work_pattern(name: str) -> re.Pattern:
    """The names of OUT's work directories (tempfile.mkdtemp's 8 random characters)."""
    return re.compile(re.escape(f".{name}{WORK_TAG}") + r"[a-z0-9_]{8}")


def work_dirs(parent: Path, name: str) -> list[str]:
    """OUT's work directories left in ``parent`` (real directories only, never a link)."""
    pattern = work_pattern(name)
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    return sorted(n for n in names if pattern.fullmatch(n) and _is_dir(parent / n))


def _is_dir(path: Path) -> bool:
    st = _lstat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def _read_small(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes (not through a symlink), if it is one and not larger than ``limit``;
    None for anything else (kit.readfile never blocks on a FIFO)."""
    try:
        return read_bytes(path, "sidecar", limit, follow_symlinks=False)
    except (OSError, KitError):
        return None


def read_manifest(path: Path) -> dict | None:
    """A manifest written by ``kit image convert``, or None."""
    data = _read_small(path, MAX_SIDECAR[MANIFEST])
    try:
        doc = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("tool") == "kit image convert" else None


def _kit_made(path: Path, suffix: str, name: str) -> bool:
    if suffix == MANIFEST:
        return read_manifest(path) is not None
    data = _read_small(path, MAX_SIDECAR[suffix])
    if data is None:
        return False
    return is_sha256_file(data, name) if suffix == SHA256 else is_pair_document(data, path)


def _check_sidecar(path: Path, suffix: str, name: str) -> None:
    if _lstat(path) is not None and not _kit_made(path, suffix, name):
        raise KitError(
            f"{path}: exists and was not written by kit image convert, which would replace it",
            fix="move it away or choose another OUT",
        )
