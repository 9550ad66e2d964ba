"""Removing a directory tree of the kit's own, read-only directories in it included, never through
a link: one rule for the kit (kit.atomic.remove_tree) and the site's installer, whose script gets
this text in place of its import (kit.transfer.assemble). Hence Python 3.6 and the standard library.

Callers decide the tree is theirs and move it out of the way first (a rename to a temp name, in
one step): a removal stopped half way leaves a temp name their cleanup removes, never a half tree
under a name that is read as whole."""

import os
import shutil


def open_up(directory: str) -> None:
    """chmod 700 a directory of a tree being removed, never through a link (os.chmod follows one:
    a name swapped for a link meanwhile would open up what it points to, as root)."""
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        # what fd holds (fchmod refuses an O_PATH fd); no r bit needed
        os.chmod("/proc/self/fd/%d" % fd, 0o700)
    finally:
        os.close(fd)


def _retry(func: object, name: str, exc_info: tuple) -> None:
    """rmtree's retry for a directory without w or x bits (an image keeps its own modes; only root
    ignores them): open it and its parent up, then remove what failed (``func`` may be os.open,
    os.rmdir or os.unlink: the retry is by what ``name`` is)."""
    exc, parent = exc_info[1], os.path.dirname(name)
    if isinstance(exc, FileNotFoundError):
        return
    if not isinstance(exc, PermissionError) or not parent:
        raise exc
    open_up(parent)
    if os.path.isdir(name) and not os.path.islink(name):
        open_up(name)
        shutil.rmtree(name, onerror=_retry)
    else:
        os.unlink(name)


def remove_dir(path: str) -> None:
    """Remove the directory PATH and all in it: shutil's fd-based rmtree never descends through a
    symlink."""
    shutil.rmtree(path, onerror=_retry)
