"""The artifact layout, in one place: an image OUT and the
files beside it, and where it is installed.

OUT (.tar.gz, .tar, .sqfs, .sif or a directory), written by `kit image convert`, has beside it
OUT.sha256 (sha256sum format), OUT.manifest.json (the conversion's record, which proves OUT is
the kit's) and, with --site, OUT.pair.yaml (the MPI pair). `kit transfer push --install` puts
it on the site as IMAGE_DIR/NAME@<sha12> (a directory), NAME@<sha12>.sqfs or NAME@<sha12>.sif,
with the link IMAGE_DIR/NAME.current naming the version in use. The names, the one .sha256
parser, the pair file's bounded reader and the one sha256-of-a-file function live here;
the names themselves are kit.artifact_names', which the script the site runs shares.
Kept free of heavy imports: the batch-script renderer reads it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kit.artifact_names import (
    CURRENT,
    MANIFEST,
    NAME_MAX,
    NAME_RE,
    PAIR,
    SHA256,
    SHA256_RE,
    SIDECARS,
    SIF,
    SQUASH,
    SUFFIXES,
    TAR,
    TAR_GZ,
    is_name,
)
from kit.errors import KitError
from kit.readfile import decode, read_bytes
from kit.yamlbound import Document, load_tagged, parse

__all__ = [  # the names, for the kit's modules: kit.artifact_names' and this module's own
    "CURRENT", "MANIFEST", "NAME_MAX", "NAME_RE", "PAIR", "SHA256", "SHA256_RE", "SIDECARS", "SIF",
    "SQUASH", "SUFFIXES", "TAR", "TAR_GZ", "is_name",
    "BUF", "PAIR_FORMAT", "PAIR_TAG", "SHA256_FILE_MAX", "current_link", "image_name",
    "is_pair_document", "is_sha256_file", "load_pair_document", "pair_path", "read_recorded_digest",
    "recorded_digest", "sha256_file", "sha256_line", "sidecar", "stem",
]  # fmt: skip

PAIR_TAG, PAIR_FORMAT = "kit_pair", 1  # IMAGE.pair.yaml's format tag
SHA256_FILE_MAX = 64 << 10  # bytes of IMAGE.sha256 worth reading (one line is 64 + 2 + a name)
BUF = 8 << 20


def stem(name: str) -> str:
    """gan3d for gan3d.tar.gz / gan3d.sqfs / gan3d.tar / gan3d.sif."""
    for suffix in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    raise KitError(
        f"{name}: not an image file",
        fix=f"give one ending in {', '.join(SUFFIXES)} (as kit image convert writes)",
    )


def image_name(text: str) -> str:
    """The installed name of an image given as NAME, an image file name or its path."""
    base = Path(text).name
    name = next((base[: -len(s)] for s in SUFFIXES if base.endswith(s)), text)
    if not is_name(name):
        raise KitError(
            f"image name {text!r}: not an image's name",
            fix="give the image's name (gan3d for gan3d.sqfs): letters, digits and . _ + -, "
            f"not starting with a dot, no '..', at most {NAME_MAX}",
        )
    return name


def sidecar(image: str | os.PathLike, suffix: str) -> Path:
    """IMAGE<suffix> beside IMAGE (a directory image's trailing slash dropped)."""
    image = Path(image)
    return image.with_name(image.name.rstrip("/") + suffix)


def pair_path(image: str | os.PathLike) -> Path:
    """IMAGE.pair.yaml, beside IMAGE."""
    return sidecar(image, PAIR)


def current_link(image_dir: str, name: str) -> str:
    """IMAGE_DIR/NAME.current, as the site sees it (image_dir may start with ~/)."""
    return f"{image_dir.rstrip('/')}/{name}{CURRENT}"


def sha256_line(digest: str, name: str) -> str:
    """One line of OUT.sha256, as `sha256sum` writes it and `sha256sum -c` reads it."""
    return f"{digest}  {name}\n"


def recorded_digest(text: str, name: str) -> str | None:
    """The digest a sha256sum-format text records for the file ``name`` (`HEX  NAME`, `HEX *NAME`
    or a path ending in NAME); None if no line names it with 64 hex digits."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*").split("/")[-1] == name:
            digest = parts[0].lower()
            return digest if SHA256_RE.fullmatch(digest) else None
    return None


def read_recorded_digest(sha_file: Path, name: str) -> str | None:
    """The digest IMAGE.sha256 records for ``name`` (bounded, never blocking); None if it names
    none; KitError if the file cannot be read as text. FileNotFoundError passes through."""
    return recorded_digest(
        decode(read_bytes(sha_file, "checksum file", SHA256_FILE_MAX), sha_file, "checksum file"),
        name,
    )


def load_pair_document(
    path: str | os.PathLike, fix: str, missing: str, *, missing_fix: str | None = None
) -> Document:
    """IMAGE.pair.yaml parsed with the kit's bounds (kit.yamlbound) and its format tag checked;
    KitError naming the file, the line and ``fix`` otherwise (``missing``: no such file)."""
    return load_tagged(
        path,
        "pair file",
        PAIR_TAG,
        version=PAIR_FORMAT,
        fix=fix,
        missing=missing,
        missing_fix=missing_fix,
        wrote="a pair file this kit wrote",
    )


def is_pair_document(data: bytes, path: str | os.PathLike) -> bool:
    """Whether bytes already read (bounded) are a pair file with the kit's format tag."""
    try:
        doc = parse(data.decode("utf-8"), path)
    except (KitError, UnicodeDecodeError):
        return False
    return isinstance(doc.value, dict) and doc.value.get(PAIR_TAG) == PAIR_FORMAT


def is_sha256_file(data: bytes, name: str) -> bool:
    """Whether bytes already read are exactly the OUT.sha256 `kit image convert` writes for
    ``name``.
    """
    text = data.decode("utf-8", "replace")
    digest = recorded_digest(text, name)
    return digest is not None and text == sha256_line(digest, name)


def sha256_file(path: str | os.PathLike, fsync: bool = False) -> str:
    """sha256 of a whole file, read in large blocks; ``fsync``: also flush it to disk (a writer's
    own output, before it is renamed into place)."""
    full = hashlib.sha256()
    buf = bytearray(BUF)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            full.update(memoryview(buf)[:n])
        if fsync:
            os.fsync(fh.fileno())
    return full.hexdigest()
