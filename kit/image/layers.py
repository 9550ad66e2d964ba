"""Stream one layer's tar members with its digest verified, its size bounded, its names safe.

A layer is read front to back exactly once per call: the stored bytes are hashed as they
are read (OCI descriptor digest), the uncompressed bytes are counted against the limits and
hashed when the layer is only known by its uncompressed digest (docker-archive diff_id).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator

import zstandard
from isal import igzip_threaded
from isal.igzip_lib import IsalError

from kit.errors import KitError
from kit.image.sources import Layer

CHUNK = 1 << 20
MAX_PATH = 4095
MAX_COMPONENT = 255


@dataclass(frozen=True)
class Limits:
    """Bounds on what one conversion reads; the ratio check catches decompression bombs."""
    max_size: int = 64 << 30        # uncompressed bytes over all layers
    max_members: int = 2_000_000    # tar members over all layers
    max_ratio: int = 100            # uncompressed / stored bytes of one layer ...
    ratio_floor: int = 1 << 30      # ... checked once a layer has expanded past this


class Budget:
    """What one pass over the layers has consumed so far."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.size = 0
        self.members = 0


class LayerError(KitError):
    """A layer is unsafe, corrupt or past a limit; the message names layer and member."""


class _HashingReader:
    """A file-like reader that hashes what passes; subclasses set the digest and read()."""

    mismatch = "its content does not match its digest"
    algo: str
    want: str
    hash: "hashlib._Hash | None"

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[:len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True

    def finish(self) -> str | None:
        """Drain the rest and return an error text when the digest disagrees."""
        while self.read(CHUNK):
            pass
        if self.hash and self.hash.hexdigest() != self.want:
            return f"{self.mismatch} (got {self.algo}:{self.hash.hexdigest()})"
        return None


class _RangeReader(_HashingReader):
    """Read a byte range of a file, hashing the bytes (the stored digest) as they pass."""

    def __init__(self, path: Path, offset: int, size: int, digest: str | None,
                 progress: Callable[[int], None] | None):
        self.fh = open(path, "rb")
        self.fh.seek(offset)
        self.left = size
        self.algo, _, self.want = (digest or "").partition(":")
        self.hash = hashlib.new(self.algo) if digest else None
        self.progress = progress

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.fh.read(n)
        self.left -= len(data)
        if self.hash:
            self.hash.update(data)
        if self.progress and data:
            self.progress(len(data))
        return data


    def close(self) -> None:
        self.fh.close()



class _CountingReader(_HashingReader):
    """Count (and optionally hash) the uncompressed tar stream; enforce the limits."""

    mismatch = "its uncompressed content does not match its diff_id"

    def __init__(self, inner: IO[bytes], budget: Budget, stored: int, diff_id: str | None,
                 layer: Layer):
        self.inner = inner
        self.budget = budget
        self.stored = max(stored, 1)
        self.count = 0
        self.layer = layer
        self.algo, _, self.want = (diff_id or "").partition(":")
        self.hash = hashlib.new(self.algo) if diff_id else None

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        self.count += len(data)
        self.budget.size += len(data)
        lim = self.budget.limits
        if self.budget.size > lim.max_size:
            raise LayerError(f"{self.layer.label}: the image expands past --max-size "
                             f"{lim.max_size} bytes; fix: raise --max-size if the image is genuine")
        if self.count > lim.ratio_floor and self.count > lim.max_ratio * self.stored:
            raise LayerError(f"{self.layer.label}: expands more than {lim.max_ratio}x "
                             f"({self.stored} stored bytes, {self.count}+ unpacked): "
                             "a decompression bomb? fix: raise --max-size only if it is genuine")
        if self.hash:
            self.hash.update(data)
        return data


    @property
    def closed(self) -> bool:
        return False



class _Forward:
    """A forward-only seekable view of a stream: lets tarfile use its random-access mode,
    whose buffering is far cheaper than stream mode's, as long as members are read in order."""

    def __init__(self, inner: IO[bytes]):
        self.inner = inner
        self.pos = 0

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        self.pos += len(data)
        return data

    def tell(self) -> int:
        return self.pos

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence == 1:
            pos += self.pos
        elif whence != 0 or pos < self.pos:
            raise io.UnsupportedOperation("layer streams are read front to back only")
        while self.pos < pos and self.read(min(CHUNK, pos - self.pos)):
            pass
        return self.pos


def _compression(layer: Layer) -> str:
    mt = layer.media_type
    if mt.endswith(("+gzip", ".gzip")):
        return "gzip"
    if mt.endswith(("+zstd", ".zstd")):
        return "zstd"
    if mt.startswith(("application/vnd.oci.image.layer.", "application/vnd.docker.image.rootfs.")):
        return "none"
    with open(layer.blob.path, "rb") as fh:  # docker-archive and flat root filesystems: sniff
        fh.seek(layer.blob.offset)
        magic = fh.read(4)
    if magic[:2] == b"\x1f\x8b":
        return "gzip"
    if magic == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return "none"


def safe_name(raw: str, layer: Layer, what: str = "member") -> str:
    """Normalise a member name ('' for the root); reject traversal, bad encoding, overlength."""
    try:
        encoded = raw.encode("utf-8")
    except UnicodeEncodeError:
        raise LayerError(f"{layer.label}: {what} {raw.encode('utf-8', 'surrogateescape')!r} "
                         "has a name that is not UTF-8; fix: rename it in the image") from None
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LayerError(f"{layer.label}: {what} {raw!r} has a '..' component (path traversal); "
                         "the image is unsafe, rebuild it without it")
    if len(encoded) > MAX_PATH or any(len(p.encode()) > MAX_COMPONENT for p in parts):
        raise LayerError(f"{layer.label}: {what} {raw[:80]!r}... has an overlong name "
                         f"(> {MAX_PATH} bytes or a component > {MAX_COMPONENT}); fix: shorten it")
    return "/".join(parts)


@dataclass
class Member:
    """One tar member of a layer: ``info.name`` is normalised; ``open()`` gives its data."""
    ordinal: int
    info: tarfile.TarInfo
    open: Callable[[], IO[bytes]]


@contextlib.contextmanager
def _tar_stream(layer: Layer, budget: Budget,
                progress) -> Iterator[tuple[tarfile.TarFile | None, Callable]]:
    blob = layer.blob
    comp = _compression(layer)
    with contextlib.ExitStack() as stack:
        raw = _RangeReader(blob.path, blob.offset, blob.size, layer.digest, progress)
        stack.callback(raw.close)
        if comp == "gzip":
            plain = igzip_threaded.open(raw, "rb", threads=1)
            stack.callback(plain.close)
        elif comp == "zstd":
            plain = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True,
                                                               closefd=False)
        else:
            plain = raw
        counted = _CountingReader(plain, budget, blob.size, layer.diff_id, layer)
        buffered = io.BufferedReader(counted, CHUNK)
        tf = (tarfile.open(fileobj=_Forward(buffered), mode="r:", errorlevel=2)
              if buffered.peek(1) else None)  # a zero-length layer holds nothing

        def finish() -> None:
            problem = counted.finish() or raw.finish()
            if problem:
                raise LayerError(f"{layer.label}: {problem}; fix: the blob is corrupt or was "
                                 "tampered with, export the image again")
        yield tf, finish


class _Window:
    """A seekable byte range of a file: an uncompressed layer inside an archive."""

    def __init__(self, fh: IO[bytes], offset: int, size: int):
        self.fh, self.offset, self.size, self.pos = fh, offset, size, 0
        fh.seek(offset)

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        data = self.fh.read(n)
        self.pos += len(data)
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, min(base + pos, self.size))
        self.fh.seek(self.offset + self.pos)
        return self.pos

    def tell(self) -> int:
        return self.pos


@contextlib.contextmanager
def _seekable_tar(layer: Layer, progress) -> Iterator[tuple[tarfile.TarFile | None, Callable]]:
    """Headers only, seeking over the data (the full pass verifies the digest)."""
    with open(layer.blob.path, "rb") as fh:
        window = _Window(fh, layer.blob.offset, layer.blob.size)
        tf = tarfile.open(fileobj=window, mode="r:", errorlevel=2) if layer.blob.size else None

        def finish() -> None:
            if progress:
                progress(layer.blob.size)
        yield tf, finish


def iter_members(layer: Layer, budget: Budget, progress=None,
                 headers_only: bool = False) -> Iterator[Member]:
    """Yield the layer's members in tar order, then verify the digest.

    ``headers_only``: the caller reads no data; an uncompressed layer is then skipped over
    by seeking instead of being read, and its digest is left to a full pass.
    Errors (corrupt or truncated data, limits, unsafe names) name the layer and the member.
    """
    if layer.media_type == "rootfs-dir":
        yield from _walk_dir(layer, budget)
        return
    last = "(start of layer)"
    seek = headers_only and _compression(layer) == "none"
    try:
        with (_seekable_tar(layer, progress) if seek
              else _tar_stream(layer, budget, progress)) as (tf, finish):
            ordinal = 0
            while tf is not None and (info := tf.next()) is not None:
                tf.members.clear()  # stream mode would otherwise keep every header
                last = info.name
                budget.members += 1
                if budget.members > budget.limits.max_members:
                    raise LayerError(f"{layer.label}: more than --max-members "
                                     f"{budget.limits.max_members} members at {last!r}; fix: raise "
                                     "--max-members if the image is genuine")
                info.name = safe_name(info.name, layer)
                if info.islnk():
                    info.linkname = safe_name(info.linkname, layer, f"hard link {info.name!r} target")
                yield Member(ordinal, info, lambda i=info: tf.extractfile(i))
                ordinal += 1
            finish()
    except KitError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error, zstandard.ZstdError, IsalError,
            ValueError) as exc:
        raise LayerError(f"{layer.label}: truncated or corrupt near member {last!r}: {exc}; "
                         "fix: export the image again") from exc


def _walk_dir(layer: Layer, budget: Budget) -> Iterator[Member]:
    """A root-filesystem directory as tar members: sorted, parents first, symlinks not followed."""
    root = layer.blob.path
    inodes: dict[tuple[int, int], str] = {}
    ordinal = 0

    def walk(rel: str) -> Iterator[Member]:
        nonlocal ordinal
        with os.scandir(root / rel if rel else root) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            name = safe_name(f"{rel}/{entry.name}" if rel else entry.name, layer)
            st = entry.stat(follow_symlinks=False)
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
            elif stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(entry.path)
            elif stat.S_ISREG(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and key in inodes:
                    info.type, info.linkname = tarfile.LNKTYPE, inodes[key]
                else:
                    inodes[key] = name
                    info.size = st.st_size
            elif stat.S_ISFIFO(st.st_mode):
                info.type = tarfile.FIFOTYPE
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                info.type = tarfile.CHRTYPE if stat.S_ISCHR(st.st_mode) else tarfile.BLKTYPE
            else:
                continue  # sockets cannot be archived
            budget.members += 1
            budget.size += info.size
            if budget.members > budget.limits.max_members or budget.size > budget.limits.max_size:
                raise LayerError(f"{layer.label}: {root} is past --max-members/--max-size at "
                                 f"{name!r}; fix: raise the limit if the tree is genuine")
            yield Member(ordinal, info, lambda p=entry.path: open(p, "rb"))
            ordinal += 1
            if info.isdir():
                yield from walk(name)

    yield from walk("")
