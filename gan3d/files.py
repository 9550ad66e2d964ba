"""Refuse FIFOs, devices and directories where a regular input file is expected, without blocking.

Opening a FIFO for reading waits for a writer forever and /dev/zero never ends, so inputs are
`stat`ed first and opened only when regular, with O_NONBLOCK (and `fstat`ed again, in case the
path was swapped in between). Callers turn `NotRegularFile` into their own one-line error.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class NotRegularFile(OSError):
    """The path exists but is not a regular file; `kind` says what it is instead."""

    def __init__(self, path: Path, kind: str):
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path, self.kind = path, kind


def one_line(exc: BaseException, limit: int = 300) -> str:
    """A library exception's text as one bounded line (h5py and Keras messages span lines)."""
    return " ".join(str(exc).split())[:limit]


def kind_of(mode: int) -> str:
    """'a FIFO', 'a directory', ... for a non-regular st_mode."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike, follow_symlinks: bool = True) -> int:
    """A read-only fd of `path` if it is a regular file (FileNotFoundError / NotRegularFile else)."""
    path = Path(path)
    st = os.stat(path, follow_symlinks=follow_symlinks)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(path, kind_of(st.st_mode))
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(path, kind_of(mode))
    return fd


def read_regular(path: str | os.PathLike, limit: int, follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (ValueError if it is larger)."""
    fd = open_regular(path, follow_symlinks)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data
