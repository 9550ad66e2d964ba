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


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: Path, what: str, error: type[KitError]) -> BinaryIO:
    """The file opened for reading, once stat and fstat both say it is a regular file."""
    refuse = f"{path}: is {{}}, not the regular file a {what} is; fix: give the {what} itself"
    try:
        if not stat.S_ISREG(mode := os.stat(path).st_mode):
            raise error(refuse.format(_kind(mode)))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror}); fix: check the path and its "
                    "permissions") from None
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(mode := os.fstat(fd).st_mode):  # replaced between stat and open
        fh.close()
        raise error(refuse.format(_kind(mode)))
    return fh


def read_bytes(path: str | os.PathLike, what: str, limit: int = MAX_BYTES,
               error: type[KitError] = KitError) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes; FileNotFoundError passes through."""
    with _open_regular(Path(path), what, error) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise error(f"{path}: larger than {limit // 2**20} MiB, far more than any {what}; fix: give the "
                    f"{what} itself")
    return data


def read_tail(path: str | os.PathLike, limit: int, what: str = "log") -> bytes:
    """The last ``limit`` bytes of a regular file (a job's log may be gigabytes)."""
    with _open_regular(Path(path), what, KitError) as fh:
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - limit))
        return fh.read(limit)


def decode(data: bytes, path: str | os.PathLike, what: str, error: type[KitError] = KitError) -> str:
    """UTF-8 text; a bad byte is named by its line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{path}:{line}: the {what} is not UTF-8 (byte 0x{data[exc.start]:02x}); fix: save "
                    "it as UTF-8") from None


def read_text(path: str | os.PathLike, what: str, limit: int = MAX_BYTES,
              error: type[KitError] = KitError) -> str:
    return decode(read_bytes(path, what, limit, error), path, what, error)


def read_json(path: str | os.PathLike, what: str, fix: str, limit: int = MAX_BYTES) -> Any:
    """A JSON document; truncated, malformed or absurdly nested JSON is one line naming the line."""
    text = read_text(path, what, limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KitError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}), as a job "
                       f"that died while writing leaves it; {fix}") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise KitError(f"{path}: not a {what} ({str(exc).splitlines()[0][:80]}); {fix}") from None
    except RecursionError:  # the C decoder's own depth guard: no partial value exists
        raise KitError(f"{path}: JSON nested too deeply to be a {what}; {fix}") from None
