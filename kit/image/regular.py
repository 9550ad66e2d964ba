"""Open a file the kit reads as image data, refusing FIFOs, devices and sockets without blocking.

Opening a FIFO for reading blocks until a writer appears, and ``/dev/zero`` never ends:
an input path, a blob or ``index.json`` must be a regular file before a byte is read
(kit.readfile.open_regular_fd); this module words the refusal for image sources.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from kit.errors import KitError
from kit.readfile import NotRegularFile, kind_name, open_regular_fd

__all__ = ["kind_name", "open_regular"]


def open_regular(path: Path, what: str, follow: bool = True) -> BinaryIO:
    """Open PATH for reading if it is a regular file; else a KitError naming WHAT.

    ``follow=False`` also refuses a symlink (a blob inside a layout must be the file itself).
    """
    try:
        return os.fdopen(open_regular_fd(path, follow_symlinks=follow), "rb")
    except NotRegularFile as exc:
        if exc.kind == "a symlink":
            raise KitError(
                f"{path}: {what} is a symlink",
                fix="copy the image again without symlinked blobs (skopeo copy)",
            ) from None
        raise KitError(
            f"{path}: {what} is {exc.kind}, not a regular file",
            fix="give the image archive or layout itself",
        ) from None
    except OSError as exc:
        raise KitError(
            f"cannot read {what}: {exc.strerror}",
            fix="check the path and its permissions",
            where=str(path),
        ) from None
