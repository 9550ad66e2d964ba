"""Atomic output: readers never see a half-written file (temp in the same dir + rename)."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", perm: int = 0o644) -> Iterator[IO]:
    """Open a temporary sibling of ``path``; rename it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, perm)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, perm: int = 0o644) -> None:
    with atomic_open(path, "w", perm) as fh:
        fh.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, perm: int = 0o644) -> None:
    with atomic_open(path, "wb", perm) as fh:
        fh.write(data)
