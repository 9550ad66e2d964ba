"""Read and create paths inside an image root without ever leaving it.

Why by hand: an image's symlinks are its author's. A chain of individually harmless relative
links (``d/up -> ..``, ``d/esc -> up/..``, ``opt -> d/esc/x``) or an absolute one
(``usr/lib -> /``) points at the host when the host kernel follows it, and a lexical check of
each link cannot see that. Here each component is opened relative to its parent's directory fd
with O_NOFOLLOW and every symlink met is resolved by this code the way chroot(2) would see it
(an absolute target starts again at the root, ``..`` at the root stays there), so nothing
outside the root is read, created, changed or deleted, and a racing rename cannot redirect us.
"""

from __future__ import annotations

import errno
import os
import stat
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kit.errors import KitError

MAX_HOPS = 40  # symlinks followed in one resolution (Linux's MAXSYMLINKS)
DIR_CACHE = 128  # open directories kept for link-free walks (a writer adds siblings in a row)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NOT_THERE = (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG)


class RootError(KitError):
    """A path that cannot be used inside the root: a symlink loop, a FIFO where a file is
    expected, a link that would have to be written through, something in the way."""


@dataclass
class _Spot:
    """Where a resolved path ends: the open directory holding its last component."""

    fd: int  # owned by the caller (close it)
    parent: str  # the directory's canonical path inside the root ('' for the root)
    name: str | None  # the last component; None when the path is the root itself

    @property
    def rel(self) -> str:
        if self.name is None:
            return self.parent
        return f"{self.parent}/{self.name}" if self.parent else self.name


@dataclass
class _Leaf(_Spot):
    """A spot below the root: its last component is known."""

    name: str


def show(path: str) -> str:
    """A path fit for a one-line message: newlines, control characters and bytes that are not
    UTF-8 (kept by Python as surrogates) are shown escaped."""
    return path if path.isprintable() else repr(path)[1:-1]


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _lstat(name: str, dirfd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in NOT_THERE:
            return None
        raise


class Root:
    """An image root held open by fd; every path given to it is an in-image path."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise KitError(
                f"cannot open the image root ({exc.strerror})",
                fix="check the path and its permissions",
                where=str(self.path),
            ) from None
        self._dirs: dict[str, int] = {}  # canonical dir -> open fd, for walks that cross no link
        self._closer = weakref.finalize(self, _close_all, self.fd, self._dirs)

    def close(self) -> None:
        self._closer()

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- resolution ---------------------------------------------------------------------------
    def _walk(
        self,
        path: str,
        *,
        follow_last: bool = True,
        through_links: bool = True,
        make_dirs: int | None = None,
    ) -> _Spot:
        """Resolve ``path`` up to its last component. Symlinks on the way are followed inside
        the root (or refused, with ``through_links=False``); missing directories are made with
        mode ``make_dirs`` if given. Raises FileNotFoundError/NotADirectoryError or RootError."""
        plain = not through_links and make_dirs is None and ".." not in path.split("/")
        if plain:  # a link-free walk always ends in the same directory: reuse it
            parent, _sep, name = "/".join(_parts(path)).rpartition("/")
            if name and parent in self._dirs:
                return _Spot(os.dup(self._dirs[parent]), parent, name)
        spot = self._walk_parts(path, follow_last, through_links, make_dirs)
        if plain and spot.name and spot.parent:
            if len(self._dirs) >= DIR_CACHE:
                os.close(self._dirs.pop(next(iter(self._dirs))))
            self._dirs[spot.parent] = os.dup(spot.fd)
        return spot

    def _walk_parts(
        self, path: str, follow_last: bool, through_links: bool, make_dirs: int | None
    ) -> _Spot:
        parts = deque(_parts(path))
        stack: list[tuple[int, str]] = [(self.fd, "")]
        hops = 0
        try:
            while parts:
                name = parts.popleft()
                if name in ("", "."):
                    continue
                if name == "..":
                    if len(stack) > 1:
                        os.close(stack.pop()[0])
                    continue
                dirfd = stack[-1][0]
                st = _lstat(name, dirfd)
                if st is None and make_dirs is not None and parts:
                    self._mkdir_at(dirfd, name, make_dirs, path)
                    st = _lstat(name, dirfd)
                if st is not None and stat.S_ISLNK(st.st_mode) and (parts or follow_last):
                    if not through_links:
                        where = "/".join([n for _fd, n in stack[1:]] + [name])
                        raise RootError(
                            f"{self.path}: "
                            f"/{show(path.lstrip('/'))} would pass through the symlink /{show(where)}; "
                            "the image is unsafe, rebuild it"
                        )
                    hops += 1
                    if hops > MAX_HOPS:
                        raise RootError(
                            f"{self.path}: /{show(path.lstrip('/'))}: "
                            f"more than {MAX_HOPS} symlinks (a loop?); fix the image's links"
                        )
                    target = os.readlink(name, dir_fd=dirfd)
                    if target.startswith("/"):
                        while len(stack) > 1:
                            os.close(stack.pop()[0])
                    parts.extendleft(reversed(target.split("/")))
                    continue
                if not parts:
                    return self._spot(stack, name)
                if st is None:
                    raise FileNotFoundError(errno.ENOENT, "no such directory", name)
                if not stat.S_ISDIR(st.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", name)
                stack.append((os.open(name, DIR_FLAGS, dir_fd=dirfd), name))
            return self._spot(stack, None)
        finally:
            for fd, _name in stack[1:]:
                os.close(fd)

    def _spot(self, stack: list[tuple[int, str]], name: str | None) -> _Spot:
        """Hand the top directory's fd to the caller (the root's is duplicated)."""
        parent = "/".join(n for _fd, n in stack[1:])
        fd = stack.pop()[0] if len(stack) > 1 else os.dup(self.fd)
        return _Spot(fd, parent, name)

    def _mkdir_at(self, dirfd: int, name: str, mode: int, path: str) -> None:
        try:
            os.mkdir(name, mode, dir_fd=dirfd)
        except FileExistsError:
            pass
        except OSError as exc:
            raise RootError(
                f"{self.path}: cannot create /{show(path.lstrip('/'))} ({exc.strerror})"
            ) from None

    def _find(self, path: str, follow_last: bool) -> _Spot | None:
        try:
            return self._walk(path, follow_last=follow_last)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except RootError:
            raise
        except OSError as exc:
            if exc.errno in NOT_THERE:
                return None
            raise RootError(
                f"{self.path}: cannot read /{show(path.lstrip('/'))} ({exc.strerror})"
            ) from None

    def find(self, path: str, follow_last: bool = True) -> tuple[str, os.stat_result] | None:
        """The canonical in-image path (no symlink left in it, '' for the root) of what ``path``
        names, and its lstat; None if nothing is there. RootError for a symlink loop."""
        spot = self._find(path, follow_last)
        if spot is None:
            return None
        try:
            st = _lstat(spot.name, spot.fd) if spot.name else os.fstat(spot.fd)
        except OSError as exc:
            raise RootError(
                f"{self.path}: cannot read /{show(spot.rel)} ({exc.strerror})"
            ) from None
        finally:
            os.close(spot.fd)
        return None if st is None else (spot.rel, st)

    def resolve(self, path: str, follow_last: bool = True) -> str | None:
        found = self.find(path, follow_last)
        return found[0] if found else None

    def lstat(self, path: str, follow_last: bool = True) -> os.stat_result | None:
        found = self.find(path, follow_last)
        return found[1] if found else None

    def is_dir(self, path: str) -> bool:
        st = self.lstat(path)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def is_file(self, path: str) -> bool:
        st = self.lstat(path)
        return st is not None and stat.S_ISREG(st.st_mode)

    def readlink(self, path: str) -> str | None:
        """The target of the symlink at ``path`` (its directory resolved inside the root)."""
        spot = self._find(path, False)
        if spot is None or spot.name is None:
            return None
        try:
            return os.readlink(spot.name, dir_fd=spot.fd)
        except OSError:
            return None
        finally:
            os.close(spot.fd)

    def listdir(self, path: str) -> list[str]:
        """Names in the directory ``path`` names inside the root; [] if it is none."""
        spot = self._find(path, True)
        if spot is None:
            return []
        try:
            fd = os.open(spot.name, DIR_FLAGS, dir_fd=spot.fd) if spot.name else os.dup(spot.fd)
        except OSError:
            return []
        finally:
            os.close(spot.fd)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def open_regular(self, path: str, follow_last: bool = True) -> IO[bytes] | None:
        """A regular file for reading, or None if nothing is there. A FIFO or device is
        refused (RootError) after an lstat, and the open itself is non-blocking and re-checked."""
        spot = self._find(path, follow_last)
        if spot is None:
            return None
        try:
            if spot.name is None:
                raise RootError(f"{self.path}: /{show(spot.rel)} is a directory, not a file")
            st = _lstat(spot.name, spot.fd)
            if st is None:
                return None
            if not stat.S_ISREG(st.st_mode):
                raise RootError(
                    f"{self.path}: /{show(spot.rel)} is {_kind(st.st_mode)}, not a regular file; "
                    "it is not read"
                )
            fd = os.open(
                spot.name,
                os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                dir_fd=spot.fd,
            )
        except OSError as exc:
            raise RootError(
                f"{self.path}: cannot read /{show(spot.rel)} ({exc.strerror})"
            ) from None
        finally:
            os.close(spot.fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the lstat
            os.close(fd)
            raise RootError(f"{self.path}: /{show(spot.rel)} is not a regular file; it is not read")
        return os.fdopen(fd, "rb")

    def read_regular(self, path: str, limit: int) -> bytes | None:
        """The bytes of a regular file, or None if absent; RootError if over ``limit`` bytes."""
        fh = self.open_regular(path)
        if fh is None:
            return None
        with fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise RootError(
                    f"{self.path}: /{show(path.lstrip('/'))} has {size} bytes, "
                    f"more than the {limit} this reader takes; it is not read"
                )
            data = fh.read(limit + 1)
        if len(data) > limit:  # it grew after the fstat: never a silently cut copy
            raise RootError(
                f"{self.path}: "
                f"/{show(path.lstrip('/'))} grew past the {limit} bytes this reader takes while it was read; "
                "it is not read"
            )
        return data

    # -- creation -----------------------------------------------------------------------------
    def _leaf(self, path: str, through_links: bool, make_parents: int | None) -> _Leaf:
        try:
            spot = self._walk(
                path, follow_last=False, through_links=through_links, make_dirs=make_parents
            )
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise RootError(
                f"{self.path}: cannot create /{show(path.lstrip('/'))}: "
                f"a parent {'is missing' if isinstance(exc, FileNotFoundError) else 'is not a directory'}"
            ) from None
        except RootError:
            raise
        except OSError as exc:
            raise RootError(
                f"{self.path}: cannot create /{show(path.lstrip('/'))} ({exc.strerror})"
            ) from None
        if spot.name is None:
            os.close(spot.fd)
            raise RootError(f"{self.path}: cannot create the image root itself")
        return _Leaf(spot.fd, spot.parent, spot.name)

    def makedirs(self, path: str, mode: int = 0o755) -> str:
        """mkdir -p inside the root, crossing the image's own symlinks as ch-run would see them;
        the canonical path of the directory. RootError if a non-directory is in the way."""
        spot = self._leaf(path, True, mode)
        try:
            st = _lstat(spot.name, spot.fd)
            if st is None:
                self._mkdir_at(spot.fd, spot.name, mode, path)
                st = _lstat(spot.name, spot.fd)
            if st is None or not stat.S_ISDIR(st.st_mode):
                raise RootError(
                    f"{self.path}: /{show(spot.rel)} is {_kind(st.st_mode) if st else 'missing'}, "
                    "not a directory",
                    fix="remove it from the image or choose another path",
                )
            return spot.rel
        finally:
            os.close(spot.fd)

    def mkdir(self, path: str, mode: int) -> None:
        """One new directory; its parents must be real directories (no symlink crossed)."""
        spot = self._leaf(path, False, None)
        try:
            os.mkdir(spot.name, mode, dir_fd=spot.fd)
        except OSError as exc:
            raise RootError(
                f"{self.path}: cannot create directory /{show(spot.rel)} ({exc.strerror})"
            ) from None
        finally:
            os.close(spot.fd)

    def create(
        self,
        path: str,
        mode: int = 0o600,
        *,
        through_links: bool = False,
        make_parents: int | None = None,
        replace: bool = False,
    ) -> IO[bytes]:
        """A new regular file for writing, never written through a link of its own name; its
        directory reached through no symlink unless ``through_links``. With ``replace`` (a tree
        the kit made) a file or symlink already there is unlinked first, as tar would."""
        spot = self._leaf(path, through_links, make_parents)
        try:
            st = _lstat(spot.name, spot.fd) if replace else None
            if st is not None and not stat.S_ISDIR(st.st_mode):
                os.unlink(spot.name, dir_fd=spot.fd)
            fd = os.open(
                spot.name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                mode,
                dir_fd=spot.fd,
            )
        except OSError as exc:
            raise RootError(
                f"{self.path}: cannot create file /{show(spot.rel)} ({exc.strerror})"
            ) from None
        finally:
            os.close(spot.fd)
        return os.fdopen(fd, "wb")

    def symlink(
        self,
        path: str,
        target: str,
        *,
        through_links: bool = False,
        replace_link: bool = False,
        make_parents: int | None = None,
    ) -> bool:
        """Create the symlink ``path`` -> ``target``; False if that very link is already there.
        An existing symlink is replaced (atomically) only with ``replace_link``; anything else
        in the way is refused: the kit never removes what it did not make."""
        spot = self._leaf(path, through_links, make_parents)
        try:
            st = _lstat(spot.name, spot.fd)
            if st is not None:
                if stat.S_ISLNK(st.st_mode) and os.readlink(spot.name, dir_fd=spot.fd) == target:
                    return False
                if not (replace_link and stat.S_ISLNK(st.st_mode)):
                    raise RootError(
                        f"{self.path}: /{show(spot.rel)} is already {_kind(st.st_mode)} in the image",
                        fix="remove it from the image recipe (the kit does not replace it)",
                    )
                tmp = f".{spot.name}.kit-{os.getpid()}"
                os.symlink(target, tmp, dir_fd=spot.fd)
                os.rename(tmp, spot.name, src_dir_fd=spot.fd, dst_dir_fd=spot.fd)
                return True
            os.symlink(target, spot.name, dir_fd=spot.fd)
            return True
        except OSError as exc:
            raise RootError(
                f"{self.path}: cannot create symlink /{show(spot.rel)} ({exc.strerror})"
            ) from None
        finally:
            os.close(spot.fd)

    def hardlink(
        self,
        path: str,
        existing: str,
        *,
        through_links: bool = False,
        make_parents: int | None = None,
    ) -> None:
        """A second name for ``existing`` (the link itself if it is a symlink, never its target)."""
        src = self._leaf(existing, through_links, None)
        try:
            dst = self._leaf(path, through_links, make_parents)
            try:
                os.link(
                    src.name, dst.name, src_dir_fd=src.fd, dst_dir_fd=dst.fd, follow_symlinks=False
                )
            except OSError as exc:
                raise RootError(
                    f"{self.path}: cannot hard-link /{show(dst.rel)} to /{show(src.rel)} ({exc.strerror})"
                ) from None
            finally:
                os.close(dst.fd)
        finally:
            os.close(src.fd)

    def set_times(self, path: str, mtime: float) -> None:
        """atime and mtime of ``path`` itself (a symlink's own, not its target's)."""
        spot = self._leaf(path, False, None)
        try:
            os.utime(spot.name, (mtime, mtime), dir_fd=spot.fd, follow_symlinks=False)
        except OSError as exc:
            raise RootError(
                f"{self.path}: cannot set the times of /{show(spot.rel)} ({exc.strerror})"
            ) from None
        finally:
            os.close(spot.fd)


def _close_all(fd: int, dirs: dict[str, int]) -> None:
    for cached in dirs.values():
        os.close(cached)
    dirs.clear()
    os.close(fd)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISREG, "a file"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "of an unknown type"
