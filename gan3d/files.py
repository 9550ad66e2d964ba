"""Refuse FIFOs, devices and directories where a regular input file is expected, without blocking.

Opening a FIFO for reading waits for a writer forever and /dev/zero never ends, so inputs are
`stat`ed first and opened only when regular, with O_NONBLOCK (and `fstat`ed again, in case the
path was swapped in between). Callers turn `NotRegularFile` into their own one-line error.
"""

from __future__ import annotations

import os

from kit.readfile import NotRegularFile, open_regular_fd

__all__ = ["NotRegularFile", "open_regular", "read_regular"]

# a read-only fd of a regular file; NotRegularFile names anything else
open_regular = open_regular_fd


def read_regular(path: str | os.PathLike, limit: int, follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (ValueError if it is larger)."""
    fd = open_regular(path, follow_symlinks)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data
