"""Open a file the kit reads as data, refusing FIFOs, devices and sockets without blocking.

Opening a FIFO for reading blocks until a writer appears, and ``/dev/zero`` never ends:
an input path, a blob or ``index.json`` must be a regular file before a byte is read.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from kit.errors import KitError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_name(mode: int) -> str:
    """How an error names a file of this mode."""
    return next((name for test, name in _KINDS if test(mode)), "of an unknown type")


def open_regular(path: Path, what: str, follow: bool = True) -> BinaryIO:
    """Open PATH for reading if it is a regular file; else a KitError naming WHAT.

    O_NONBLOCK makes the open of a FIFO return at once, so it can be refused after fstat;
    ``follow=False`` also refuses a symlink (a blob inside a layout must be the file itself).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise KitError(f"{path}: {what} is a symlink; fix: copy the image again without "
                           "symlinked blobs (skopeo copy)") from None
        raise KitError(f"{path}: cannot read {what}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise KitError(f"{path}: {what} is {kind_name(st.st_mode)}, not a regular file; "
                       "fix: give the image archive or layout itself")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
