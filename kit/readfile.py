"""Read a file the kit expects to be a small regular file, without ever blocking or ballooning.

A FIFO would block a plain open() forever and /dev/zero would fill memory; a file is checked with
stat before it is opened (O_NONBLOCK, so even a swapped-in FIFO cannot block), checked again with
fstat, and read up to a size cap. Every refusal is one line naming the file and the fix.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from kit.errors import KitError

MAX_BYTES = 4 * 2**20  # site configs, pair files, plans, ledgers and results are kilobytes


_KINDS = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_name(mode: int) -> str:
    """How an error names a file of this mode ('a FIFO', 'a directory', ...)."""
    return next((name for test, name in _KINDS if test(mode)), "of an unknown type")


class NotRegularFile(OSError):
    """The path exists but is no regular file; ``kind`` says what it is instead."""

    def __init__(self, path: str | os.PathLike[str], kind: str):
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path, self.kind = path, kind


def open_regular_fd(path: str | os.PathLike[str], follow_symlinks: bool = True) -> int:
    """A read-only fd of PATH once stat and fstat both say it is a regular file.

    What the kit's readers of host files it did not make build on: a stat first (a device is
    never opened), O_NONBLOCK so that a FIFO swapped in after the stat cannot block the open,
    fstat after it.
    FileNotFoundError and other OSErrors pass through; NotRegularFile names what is there.
    """
    st = os.stat(path, follow_symlinks=follow_symlinks)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(path, kind_name(st.st_mode))
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(path, kind_name(mode))
    os.set_blocking(fd, True)
    return fd


def _open_regular(
    path: Path, what: str, error: type[KitError], follow_symlinks: bool = True
) -> BinaryIO:
    """The file opened for reading; anything but a regular file is ``error`` naming it."""
    try:
        return os.fdopen(open_regular_fd(path, follow_symlinks), "rb")
    except FileNotFoundError:
        raise
    except NotRegularFile as exc:
        raise error(
            f"is {exc.kind}, not the regular file a {what} is",
            fix=f"give the {what} itself",
            where=str(path),
        ) from None
    except OSError as exc:
        raise error(
            f"cannot read the {what} ({exc.strerror})",
            fix="check the path and its permissions",
            where=str(path),
        ) from None


def read_bytes(
    path: str | os.PathLike[str],
    what: str,
    limit: int = MAX_BYTES,
    *,
    error: type[KitError] = KitError,
    follow_symlinks: bool = True,
) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes; FileNotFoundError passes through.
    ``follow_symlinks`` False: a symlink is refused as not a regular file."""
    with _open_regular(Path(path), what, error, follow_symlinks) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        size = f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit} bytes"
        raise error(
            f"larger than {size}, far more than any {what}",
            fix=f"give the {what} itself",
            where=str(path),
        )
    return data


def read_tail(path: str | os.PathLike[str], limit: int, what: str = "log") -> bytes:
    """The last ``limit`` bytes of a regular file (a job's log may be gigabytes)."""
    with _open_regular(Path(path), what, KitError) as fh:
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - limit))
        return fh.read(limit)


def decode(
    data: bytes, path: str | os.PathLike[str], what: str, *, error: type[KitError] = KitError
) -> str:
    """UTF-8 text; a bad byte is named by its line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            f"the {what} is not UTF-8 (byte 0x{data[exc.start]:02x})",
            fix="save it as UTF-8",
            where=f"{path}:{line}",
        ) from None


def read_text(
    path: str | os.PathLike[str],
    what: str,
    *,
    limit: int = MAX_BYTES,
    error: type[KitError] = KitError,
) -> str:
    return decode(read_bytes(path, what, limit, error=error), path, what, error=error)


_JSON_KINDS = (
    (dict, "an object"),
    (list, "an array"),
    (str, "a string"),
    (bool, "true or false"),
    (int, "a number"),
    (float, "a number"),
)


def json_kind(value: Any) -> str:
    """How a message names a JSON value's type ("an array", "null"): a file whose top level is of
    the wrong type is named by what it holds, in JSON's words."""
    return next((name for kind, name in _JSON_KINDS if isinstance(value, kind)), "null")


def read_json_object(
    path: str | os.PathLike[str], what: str, fix: str, *, limit: int = MAX_BYTES
) -> dict[str, Any]:
    """A JSON document whose top level is an object; any other is one line naming the file.
    ``fix``: what the user does about a file that is not one (KitError's fix)."""
    doc = read_json(path, what, fix, limit=limit)
    if not isinstance(doc, dict):
        raise KitError(
            f"the top level is {json_kind(doc)}, not the object a {what} is",
            fix=fix,
            where=str(path),
        )
    return doc


def read_json(path: str | os.PathLike[str], what: str, fix: str, *, limit: int = MAX_BYTES) -> Any:
    """A JSON document; truncated, malformed or absurdly nested JSON is one line naming the line,
    with ``fix``."""
    text = read_text(path, what, limit=limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KitError(
            f"not valid JSON ({exc.msg}, column {exc.colno}), "
            "as a job that died while writing leaves it",
            fix=fix,
            where=f"{path}:{exc.lineno}",
        ) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise KitError(
            f"not a {what} ({str(exc).splitlines()[0][:80]})", fix=fix, where=str(path)
        ) from None
    except RecursionError:  # the C decoder's own depth guard: no partial value exists
        raise KitError(f"JSON nested too deeply to be a {what}", fix=fix, where=str(path)) from None
