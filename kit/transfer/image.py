"""The local side of an image to move: its name, its sibling files and its checksums."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from kit.errors import KitError
from kit.image_names import NAME_RE, stem

SIBLINGS = (".sha256", ".manifest.json", ".pair.yaml")
SHA_RE = re.compile(r"^[0-9a-f]{64}\Z")
BUF = 8 << 20


@dataclass
class LocalImage:
    path: Path
    stem: str                 # the name without its format suffix: versions are stem@sha
    siblings: list[Path]      # IMAGE.sha256 / .manifest.json / .pair.yaml that exist

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    @property
    def sha_file(self) -> Path | None:
        return next((p for p in self.siblings if p.name.endswith(".sha256")), None)


def open_image(path: str | Path) -> LocalImage:
    """Check the file and its name; collect the siblings `kit image convert` writes next to it."""
    path = Path(path)
    if not path.is_file():
        raise KitError(f"{path}: no such image file")
    if not NAME_RE.match(path.name):
        raise KitError(f"{path.name}: image names may hold only letters, digits and . _ + - "
                       "and must not start with a dot; rename the file")
    name = stem(path.name)
    siblings = [path.with_name(path.name + s) for s in SIBLINGS]
    siblings += [path.with_name(name + s) for s in SIBLINGS]
    found = []
    for p in siblings:
        if p.is_file() and p not in found:
            found.append(p)
    return LocalImage(path, name, found)


def recorded_sha256(image: LocalImage) -> str | None:
    """The digest IMAGE.sha256 records for the image (sha256sum format), if that file exists."""
    sha_file = image.sha_file
    if sha_file is None:
        return None
    for line in sha_file.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*").split("/")[-1] == image.path.name:
            if not SHA_RE.match(parts[0].lower()):
                break
            return parts[0].lower()
    raise KitError(f"{sha_file}: no line '<64 hex digits>  {image.path.name}' (sha256sum format); "
                   f"fix: regenerate it with sha256sum {image.path.name} > {sha_file.name}")


def sha256_file(path: Path) -> str:
    full = hashlib.sha256()
    buf = bytearray(BUF)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            full.update(memoryview(buf)[:n])
    return full.hexdigest()


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
