"""The local side of an image to move: its name, its sibling files and its checksums."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from kit.errors import KitError

SUFFIXES = (".tar.gz", ".tgz", ".sqfs", ".tar")
SIBLINGS = (".sha256", ".manifest.json", ".pair.yaml")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
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


def _stem(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    raise KitError(f"{name}: not an image file; expected one of {', '.join(SUFFIXES)} "
                   "(as written by kit image convert)")


def image_name(text: str) -> str:
    """The installed name of an image given as NAME, an image file name or its path."""
    name = _stem(Path(text).name) if text.endswith(SUFFIXES) else text
    if not NAME_RE.match(name):
        raise KitError(f"image name {text!r}: give the image's name (gan3d for gan3d.sqfs): letters, "
                       "digits and . _ + -, not starting with a dot")
    return name


def open_image(path: str | Path) -> LocalImage:
    """Check the file and its name; collect the siblings `kit image convert` writes next to it."""
    path = Path(path)
    if not path.is_file():
        raise KitError(f"{path}: no such image file")
    if not NAME_RE.match(path.name):
        raise KitError(f"{path.name}: image names may hold only letters, digits and . _ + - "
                       "and must not start with a dot; rename the file")
    stem = _stem(path.name)
    siblings = [path.with_name(path.name + s) for s in SIBLINGS]
    siblings += [path.with_name(stem + s) for s in SIBLINGS]
    found = []
    for p in siblings:
        if p.is_file() and p not in found:
            found.append(p)
    return LocalImage(path, stem, found)


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
