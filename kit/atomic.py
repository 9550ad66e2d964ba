"""Atomic output: readers never see a half-written file (temp in the same dir + rename)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Callable

from kit import interrupt
from kit.tree_removal import remove_dir


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike[str], mode: str = "wb", *, perm: int = 0o644, replace: bool = True
) -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path``; rename it into place only if the block succeeds.
    ``replace`` False: a file that appeared at ``path`` meanwhile is kept (FileExistsError)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, perm)
        if replace:
            os.replace(tmp, path)
        else:
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                rename_noreplace(dir_fd, os.path.basename(tmp), path.name)
            finally:
                os.close(dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(
    path: str | os.PathLike[str], text: str, *, perm: int = 0o644, replace: bool = True
) -> None:
    with atomic_open(path, "w", perm=perm, replace=replace) as fh:
        fh.write(text)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, perm: int = 0o644) -> None:
    with atomic_open(path, "wb", perm=perm) as fh:
        fh.write(data)


def write_together(files: dict[Path, bytes], perm: int = 0o644) -> None:
    """Write files that only mean something together (a report and its plots): each is staged in
    a temporary sibling first, then all are renamed into place with Ctrl-C and SIGTERM held, so a
    stopped run leaves every one old or every one new, never a new report beside old plots."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, perm)
        with interrupt.held():
            while staged:
                tmp, path = staged[0]
                os.replace(tmp, path)
                staged.pop(0)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


# -- renames that cannot clobber: renameat2(2) through libc --------------------------------

_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT: tuple[Any, Any] | None = None  # (libc's renameat2 or False, ctypes), looked up once


def _renameat2(dir_fd: int, old: str, new: str, flags: int) -> None:
    """renameat2 within one directory; OSError(EINVAL) where the filesystem or libc lacks it."""
    global _AT
    if _AT is None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        _AT = getattr(libc, "renameat2", False), ctypes
    func, ctypes = _AT
    if not func:
        raise OSError(errno.EINVAL, "renameat2 is not in this C library", new)
    if func(dir_fd, os.fsencode(old), dir_fd, os.fsencode(new), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), new)


def rename_noreplace(dir_fd: int, old: str, new: str) -> None:
    """Rename OLD to NEW in the directory ``dir_fd`` only if NEW does not exist (FileExistsError).

    Where the filesystem cannot (NFS), it falls back to check-then-rename: a window of one
    system call in which a file created at NEW by someone else would be replaced.
    """
    try:
        _renameat2(dir_fd, old, new, _RENAME_NOREPLACE)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        try:
            os.lstat(new, dir_fd=dir_fd)
        except FileNotFoundError:
            os.rename(old, new, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), new) from None


def exchange(dir_fd: int, a: str, b: str) -> None:
    """Swap A and B in the directory ``dir_fd`` in one step: each name always names a whole tree.

    OSError(EINVAL) where the filesystem cannot (kit.image.output probes before converting).
    """
    _renameat2(dir_fd, a, b, _RENAME_EXCHANGE)


def exchange_if(dir_fd: int, new: str, final: str, *, expected: int) -> bool:
    """Exchange NEW and FINAL, keeping the swap only if what FINAL held is the inode EXPECTED (the
    one the caller recognised as its own): else the swap is undone and False returned. Call with the
    stops held (kit.interrupt.held): one between the two exchanges would leave a foreign tree at
    NEW."""
    exchange(dir_fd, new, final)
    if os.stat(new, dir_fd=dir_fd, follow_symlinks=False).st_ino == expected:
        return True
    exchange(dir_fd, new, final)
    return False


def fsync_dir(dir_fd: int) -> None:
    """Make renames in the directory durable (a crash must not bring back the old name)."""
    os.fsync(dir_fd)


def sync_filesystem(fd: int) -> None:
    """Write back everything on the filesystem holding ``fd`` (syncfs(2); sync(2) where libc lacks
    it): one call makes a whole unpacked tree durable before it is renamed into place, where an
    fsync per file would cost a disk flush per file."""
    import ctypes

    syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if syncfs is None or syncfs(fd) != 0:
        os.sync()


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file or a directory by name (a directory: its entries, before it is renamed)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove a tree the kit made, read-only directories in it included; never follows links."""
    if os.path.isdir(path) and not os.path.islink(path):
        remove_dir(os.fspath(path))


def remove_tree_if(
    path: Path, aside: str, expected: int, *, owned: Callable[[Path], bool] = lambda tree: True
) -> bool:
    """Remove the directory PATH only if it is still the inode EXPECTED (the tree the caller checked
    as its own) and ``owned`` still says so of it: it is first renamed to the sibling ASIDE (a name
    the caller's cleanup knows), checked there (an inode number can be reused by a tree made since),
    and put back if it is another tree (False; nothing removed). A stop after the rename leaves the
    tree under ASIDE, whole until its removal has begun; the caller's cleanup removes it."""
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with interrupt.held():
            try:
                rename_noreplace(fd, path.name, aside)
            except (
                FileNotFoundError,
                FileExistsError,
            ):  # gone already, or ASIDE taken: nothing moved
                return False
            if os.stat(aside, dir_fd=fd, follow_symlinks=False).st_ino != expected or not owned(
                path.parent / aside
            ):
                rename_noreplace(fd, aside, path.name)
                return False
            fsync_dir(fd)
    finally:
        os.close(fd)
    remove_tree(path.parent / aside)
    return True


def replace_tree(new: Path, final: Path, expected: int | None) -> None:
    """Put the directory NEW (a sibling the caller built) at FINAL: the FINAL the caller recognised
    as its own (inode EXPECTED; None: none) is exchanged with it in one step (renameat2), then that
    old tree, now at NEW, is removed. A reader, or a process killed at any instant, sees the whole
    old or the whole new tree; a stop during the removal leaves the old tree under NEW's temporary
    name. FileExistsError if FINAL is not the one recognised (swapped meanwhile: put back, nothing
    removed); OSError(EINVAL) where the filesystem cannot exchange; nothing has moved then."""
    fd = os.open(final.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with interrupt.held():
            if expected is None:
                rename_noreplace(fd, new.name, final.name)
            elif not exchange_if(fd, new.name, final.name, expected=expected):
                raise FileExistsError(
                    errno.EEXIST, "changed while it was being replaced", str(final)
                )
            fsync_dir(fd)
    finally:
        os.close(fd)
    remove_tree(new)


def open_lock_file(path: Path, what: str) -> int:
    """The kit's own lock file at PATH, opened for flock: a link planted there is refused, never
    followed, and a FIFO or device neither blocks the open (O_NONBLOCK) nor is taken for one."""
    from kit.errors import KitError

    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644
        )
    except OSError as exc:
        raise KitError(
            f"{path}: cannot open {what} ({exc.strerror})", fix="remove what is at that name"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise KitError(f"{path}: not a regular file", fix="remove what is at that name")
    return fd


def open_log(path: Path, what: str) -> IO[bytes]:
    """The kit's own log at PATH, opened to append (never truncated: an earlier run's lines stay): a
    link planted there is refused, never followed, and a FIFO or device neither blocks the open nor
    is written to."""
    from kit.errors import KitError

    try:
        fd = os.open(
            path,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            0o644,
        )
    except OSError as exc:
        raise KitError(
            f"{path}: cannot open {what} ({exc.strerror})", fix="move aside what is at that name"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise KitError(
            f"{path}: not a regular file, so not {what}", fix="move aside what is at that name"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")


def own_dir(path: Path, what: str) -> Path:
    """The kit's own directory at PATH (its parent exists or is made): made with mkdir, which never
    follows a link, and checked with lstat, so a link or a file planted at its name is refused in
    one line and nothing is written through it."""
    from kit.errors import KitError
    from kit.readfile import kind_name

    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)
    mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        raise KitError(
            f"{path}: is {kind_name(mode)}, not {what} the kit makes there; "
            "it writes nothing through what it did not make",
            fix="move it aside",
        )
    return path
