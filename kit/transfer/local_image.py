"""The local side of an image to move (kit transfer): its name, its sibling files and its
checksums.
"""

from __future__ import annotations

import hashlib
import stat
from dataclasses import dataclass
from pathlib import Path

from kit.errors import KitError
from kit.image_names import (
    BUF,
    NAME_RE,
    SHA256,
    SIDECARS,
    read_recorded_digest,
    sidecar,
    stem,
)


@dataclass
class LocalImage:
    path: Path
    stem: str  # the name without its format suffix: versions are stem@sha
    siblings: list[Path]  # IMAGE.sha256 / .manifest.json / .pair.yaml that exist

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    @property
    def sha_file(self) -> Path | None:
        return next((p for p in self.siblings if p.name.endswith(SHA256)), None)


def _kind(path: Path) -> str | None:
    """None for a regular file (through links: these are the user's own files); else what it is."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a dangling symlink" if path.is_symlink() else "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    return (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a directory"
        if stat.S_ISDIR(mode)
        else "not a regular file"
    )


def open_local_image(path: str | Path) -> LocalImage:
    """Check the file and its name (kit.image_names.SUFFIXES); collect the siblings `kit image convert`
    writes next to it. A sibling name held by a FIFO, device or dangling link is refused (it
    would block or lie)."""
    path = Path(path)
    kind = _kind(path)
    if kind == "missing":
        raise KitError(
            "no such image file",
            fix="give an image kit image convert wrote (OUT.tar.gz, OUT.sqfs or OUT.sif)",
            where=str(path),
        )
    if kind:
        raise KitError(
            f"the image is {kind}, not a regular file",
            fix="give the image file itself",
            where=str(path),
        )
    if not NAME_RE.fullmatch(path.name):
        raise KitError(
            "image names may hold only letters, digits and . _ + - and must not start with a dot",
            fix="rename the file (gan3d.tar.gz, say) and its sibling files with it",
            where=str(path),
        )
    name = stem(path.name)
    siblings = [sidecar(path, s) for s in SIDECARS]
    siblings += [path.with_name(name + s) for s in SIDECARS]
    found = []
    for p in siblings:
        kind = _kind(p)
        if kind not in (None, "missing"):
            raise KitError(
                f"this sibling of {path.name} is {kind}, not a regular file",
                fix="remove it, or write it again with kit image convert",
                where=str(p),
            )
        if kind is None and p not in found:
            found.append(p)
    return LocalImage(path, name, found)


def recorded_sha256(image: LocalImage) -> str | None:
    """The digest IMAGE.sha256 records for the image (sha256sum format), if that file exists."""
    sha_file = image.sha_file
    if sha_file is None:
        return None
    digest = read_recorded_digest(sha_file, image.path.name)
    if digest is not None:
        return digest
    raise KitError(
        f"{sha_file}: no line '<64 hex digits>  {image.path.name}' (sha256sum format)",
        fix=f"regenerate it with sha256sum {image.path.name} > {sha_file.name}",
    )


def chunk_sha256(path: Path, chunk: int, count: int) -> list[str]:
    """sha256 of each of the first `count` chunks (only the prefix is read)."""
    out = []
    with open(path, "rb", buffering=0) as fh:
        for _ in range(count):
            h, left = hashlib.sha256(), chunk
            while left and (data := fh.read(min(BUF, left))):
                h.update(data)
                left -= len(data)
            out.append(h.hexdigest())
    return out
