"""Removing a directory tree of the kit's own, read-only directories in it included, never through
a link: one rule for the kit (kit.atomic.remove_tree) and the site's installer, whose script gets
this text in place of its import (kit.transfer.assemble). Hence Python 3.6 and the standard library.

Callers decide the tree is theirs and move it out of the way first (a rename to a temp name, in
one step): a removal stopped half way leaves a temp name their cleanup removes, never a half tree
under a name that is read as whole."""

import errno
import os
import stat

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_up(name: str, dir_fd: "int | None" = None) -> None:
    """chmod 700 the directory NAME, never through a link (os.chmod follows one: a name swapped for
    a link meanwhile would open up what it points to, as root)."""
    fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        # what fd holds (fchmod refuses an O_PATH fd); no r bit needed
        os.chmod("/proc/self/fd/%d" % fd, 0o700)
    finally:
        os.close(fd)


def _open_dir(name: str, parent_fd: int) -> int:
    """A descriptor that lists and empties the directory NAME (an image keeps its own modes, which
    may shut out even its owner: only root ignores them); never through a link."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except PermissionError:
        open_up(name, parent_fd)
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    if os.fstat(fd).st_mode & 0o300 != 0o300:  # w and x: what removing its entries needs
        os.fchmod(fd, 0o700)
    return fd


def _identity(fd: int) -> "tuple[int, int]":
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def remove_dir(path: str) -> None:
    """Remove the directory PATH and all in it, depth first, without recursion and with two
    descriptors open at any depth: an image's tree may be 2,000 directories deep, past Python's
    recursion limit and a site's descriptor limit, which shutil.rmtree would reach."""
    path = path.rstrip("/") or "/"
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory (a link is never followed)", path)
    top_parent = os.open(os.path.dirname(path) or ".", DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        fd = _open_dir(os.path.basename(path), top_parent)
        # per directory above fd: its identity, fd's name in it, its names left
        above = []  # type: list[tuple[tuple[int, int], str, list[str]]]
        todo = os.listdir(fd)
        try:
            while True:
                if todo:
                    name = todo.pop()
                    try:
                        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
                        if not stat.S_ISDIR(mode):
                            os.unlink(name, dir_fd=fd)
                            continue
                        child = _open_dir(name, fd)
                    except FileNotFoundError:
                        continue
                    above.append((_identity(fd), name, todo))
                    os.close(fd)
                    fd, todo = child, os.listdir(child)
                    continue
                if not above:
                    break
                parent = os.open("..", DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = parent
                expected, name, todo = above.pop()
                if _identity(fd) != expected:
                    raise OSError(
                        errno.ESTALE, "a directory moved while its tree was removed", path
                    )
                os.rmdir(name, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(os.path.basename(path), dir_fd=top_parent)
    finally:
        os.close(top_parent)
