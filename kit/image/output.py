"""Write OUT so that it is, at every instant, the complete old image or the complete new one.

One run for OUT at a time holds ``.OUT.kit-lock`` and works in ``.OUT.kit-tmp.XXXXXXXX`` beside
OUT. The new image and its sidecars are finished and staged there first; then the image goes
in (a file by rename, a directory by an atomic exchange with the old one), then the sidecars,
the manifest last. The manifest records the image's identity, so a reader (and the next run)
can tell a manifest that does not describe OUT; a run killed between the two finds its staged
sidecars and installs them before anything else. SIGINT waits for the renames to finish.
Leftover work directories of THIS output are removed by the next run; nothing else is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Callable

from kit import interrupt
from kit.atomic import (
    atomic_write_bytes,
    exchange,
    exchange_if,
    fsync_dir,
    fsync_path,
    remove_tree,
    rename_noreplace,
)
from kit.errors import KitError
from kit.image.target import LOCK_TAG, STAGED, WORK_TAG, Target, read_manifest, work_dirs
from kit.image_names import MANIFEST, SIDECARS

Stager = Callable[[Path], object]  # writes one sidecar's content to the path it is given


class Work:
    """One run's work directory for OUT; ``commit`` puts what was built there into place."""

    def __init__(self, target: Target, dir_fd: int, lock_fd: int):
        self.target, self.dir_fd, self.lock_fd = target, dir_fd, lock_fd
        self.name = os.path.basename(
            tempfile.mkdtemp(prefix=f".{target.name}{WORK_TAG}", dir=target.parent)
        )
        self.path = target.parent / self.name
        self.swapped = False  # past this point the staged sidecars must survive a failure

    def commit(self, built: Path, sidecars: Mapping[str, Stager]) -> None:
        """Stage ``sidecars`` (suffix -> stager, the manifest among them), then swap everything
        in.
        """
        for suffix in SIDECARS:  # the manifest last: its presence means the staging is complete
            if suffix in sidecars:
                staged = self.path / f"{STAGED}{suffix}"
                sidecars[suffix](staged)
        fsync_path(self.path)
        with interrupt.held():
            self._swap(built)
            self.swapped = True
            install_staged(self.target, self.dir_fd, self.name)

    def _swap(self, built: Path) -> None:
        t = self.target
        inner = os.path.relpath(built, t.parent)  # WORK/out or WORK/root
        if t.existing is None:
            try:
                rename_noreplace(self.dir_fd, inner, t.name)
            except FileExistsError:
                raise KitError(
                    f"{t.out}: appeared while converting; nothing was replaced",
                    fix="move it away or choose another OUT",
                ) from None
        elif t.fmt == "dir":
            # old image: WORK/root
            if not exchange_if(self.dir_fd, inner, t.name, expected=t.existing["inode"]):
                raise KitError(
                    f"{t.out}: changed while converting; nothing was replaced", fix="run again"
                )
        else:
            if _identity_at(self.dir_fd, t.name) != t.existing["inode"]:
                raise KitError(
                    f"{t.out}: changed while converting; nothing was replaced", fix="run again"
                )
            os.rename(inner, t.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        fsync_dir(self.dir_fd)


def _identity_at(dir_fd: int, name: str) -> int | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino
    except FileNotFoundError:
        return None


def install_staged(target: Target, dir_fd: int, work: str) -> None:
    """Put a work directory's staged sidecars beside OUT; drop the kit's own sidecars of OUT that
    the new image has none of (e.g. the .pair.yaml of an earlier paired conversion)."""
    manifest = read_manifest(target.parent / work / f"{STAGED}{MANIFEST}")
    if manifest is None:
        return  # everything was installed already
    keep = set(manifest.get("sidecars") or ())
    for suffix in SIDECARS:
        staged = f"{work}/{STAGED}{suffix}"
        if os.path.lexists(target.parent / staged):
            os.rename(staged, f"{target.name}{suffix}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        elif suffix not in keep and suffix != MANIFEST:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{target.name}{suffix}", dir_fd=dir_fd)
    fsync_dir(dir_fd)


@contextlib.contextmanager
def claim(target: Target) -> Iterator[Work]:
    """Lock OUT, finish or clear what an earlier interrupted run left, and give a work directory.

    On failure before the image went in, the work directory goes and OUT is untouched."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise KitError(
            f"{target.out}: cannot use the directory {target.parent} ({exc.strerror})",
            fix="create it or choose OUT elsewhere",
        ) from None
    try:
        lock_fd = _lock(target, dir_fd)
        try:
            target = target.recheck()
            try:
                if target.existing is not None and target.fmt == "dir":
                    _check_exchange(target)
                if target.pending:
                    install_staged(target, dir_fd, target.pending)
                for name in work_dirs(target.parent, target.name):
                    remove_tree(target.parent / name)
                work = Work(target, dir_fd, lock_fd)
            except OSError as exc:
                raise KitError(
                    f"{target.out}: {exc.strerror or exc} while preparing to write it; "
                    "nothing was replaced",
                    fix=f"check the free space and permissions of {target.parent}",
                ) from exc
            try:
                yield work
            except BaseException:
                if not (work.swapped and (work.path / f"{STAGED}{MANIFEST}").exists()):
                    remove_tree(work.path)  # unless it holds the sidecars of the image now at OUT
                raise
            remove_tree(work.path)
        finally:
            os.unlink(f".{target.name}{LOCK_TAG}", dir_fd=dir_fd)
            os.close(lock_fd)
    finally:
        os.close(dir_fd)


def _lock(target: Target, dir_fd: int) -> int:
    """Hold ``.OUT.kit-lock`` (flock; the file is removed by its holder when done)."""
    name = f".{target.name}{LOCK_TAG}"
    for _ in range(10):  # the holder may remove the file between our open and our flock
        try:
            fd = os.open(
                name,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o600,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            raise KitError(
                f"{target.parent / name}: cannot create the lock ({exc.strerror})",
                fix="make the directory writable or choose OUT elsewhere",
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise KitError(f"{target.parent / name}: not a regular file", fix="move it away")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KitError(
                f"{target.out}: another kit image convert is writing it (it holds {name})",
                fix="wait for it to finish",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        if _identity_at(dir_fd, name) == os.fstat(fd).st_ino:
            return fd
        os.close(fd)
    raise KitError(f"{target.parent / name}: the lock keeps changing", fix="run again")


def _check_exchange(target: Target) -> None:
    """Replacing a directory needs an atomic swap; find out now, before converting, if the
    filesystem has none (NFS): the kit will not leave a moment without an image at OUT."""
    probe = Path(tempfile.mkdtemp(prefix=f".{target.name}{WORK_TAG}", dir=target.parent))
    try:
        (probe / "a").mkdir()
        (probe / "b").mkdir()
        fd = os.open(probe, os.O_RDONLY | os.O_DIRECTORY)
        try:
            exchange(fd, "a", "b")
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
        raise KitError(
            f"{target.out}: this filesystem cannot swap directories atomically, "
            "so the directory image cannot be replaced in place",
            fix="move the old image away yourself, or write a file image (.sqfs, .tar.gz)",
        ) from None
    finally:
        remove_tree(probe)


def stage_text(text: str) -> Stager:
    """A stager writing ``text`` (atomically: a half-written staged sidecar is never installed)."""
    return lambda path: atomic_write_bytes(path, text.encode())
