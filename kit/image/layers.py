"""Stream one layer's tar members with its digest verified, its size bounded, its names safe.

A layer is read front to back exactly once per call: the stored bytes are hashed as they
are read (OCI descriptor digest), the uncompressed bytes are counted against the limits and
hashed when the layer is only known by its uncompressed digest (docker-archive diff_id).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Protocol

from kit import archive_rules as rules
from kit.errors import KitError
from kit.image.regular import kind_name, open_regular
from kit.image.sources import Layer
from kit.tarsafe import first_nonzero, forget_members, open_tar

CHUNK = 1 << 20


@functools.cache
def read_errors() -> tuple[type[BaseException], ...]:
    """What a damaged layer raises when read. The codecs ([convert] extra) are imported here, not
    with the module: `kit image --help` reads Limits without them."""
    import zstandard
    from isal.igzip_lib import IsalError

    # IsalError is a class; isal's stub declares it an instance (`IsalError: Exception`).
    return (  # type: ignore[return-value]
        tarfile.TarError,
        EOFError,
        OSError,
        zlib.error,
        zstandard.ZstdError,
        IsalError,
        ValueError,
    )


@dataclass(frozen=True)
class Limits:
    """Bounds on what one conversion reads; the ratio check catches decompression bombs."""

    max_size: int = rules.MAX_SIZE  # uncompressed bytes over all layers
    max_members: int = rules.MAX_MEMBERS  # tar members over all layers
    max_ratio: int = rules.MAX_RATIO  # uncompressed / stored bytes of one layer ...
    ratio_floor: int = rules.RATIO_FLOOR  # ... checked once a layer has expanded past this


class Budget:
    """What one pass over the layers has consumed so far."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.size = 0
        self.members = 0


class Data(Protocol):
    """A member's data as the writers read it: read() to the end, then close()."""

    def read(self, n: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class LayerError(KitError):
    """A layer is unsafe, corrupt or past a limit; the message names layer and member."""


class _HashingReader:
    """A file-like reader that hashes what passes; subclasses set the digest and read()."""

    mismatch = "its content does not match its digest"
    algo: str
    want: str
    hash: hashlib._Hash | None

    def read(self, n: int = -1) -> bytes:
        raise NotImplementedError

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[: len(data)] = data
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

    def __init__(
        self,
        path: Path,
        offset: int,
        size: int,
        digest: str | None,
        progress: Callable[[int], None] | None,
    ):
        self.fh = open_regular(path, "the layer blob")
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

    def __init__(
        self, inner: IO[bytes], budget: Budget, stored: int, diff_id: str | None, layer: Layer
    ):
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
            raise LayerError(
                f"{self.layer.label}: the image expands past --max-size {lim.max_size} bytes",
                fix="raise --max-size if the image is genuine",
            )
        if self.count > lim.ratio_floor and self.count > lim.max_ratio * self.stored:
            raise LayerError(
                f"{self.layer.label}: expands more than {lim.max_ratio}x ({self.stored} stored bytes, "
                f"{self.count}+ unpacked): a decompression bomb?",
                fix="raise --max-size only if it is genuine",
            )
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
        self.last_at, self.last = 0, b""  # the latest read: where tarfile's last header was

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        self.last_at, self.last = self.pos, data
        self.pos += len(data)
        return data

    def rest_from(self, offset: int) -> Iterator[bytes]:
        """The bytes from OFFSET (inside the latest read) to the end of the stream."""
        if not self.last_at <= offset <= self.pos:
            raise io.UnsupportedOperation(f"cannot look back to byte {offset}")
        yield self.last[offset - self.last_at :]
        while chunk := self.read(CHUNK):
            yield chunk

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
    # docker-archive, flat rootfs: sniff
    with open_regular(layer.blob.path, "the layer blob") as fh:
        fh.seek(layer.blob.offset)
        magic = fh.read(4)
    if magic[:2] == b"\x1f\x8b":
        return "gzip"
    if magic == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return "none"


# what the one who made the image can do about each broken rule (kit.archive_rules)
RULE_FIXES = {
    "encoding": "rename it in the image",
    "nul": "rebuild the layer",
    "traversal": "rebuild the image without it",
    "length": "shorten it",
}


def safe_name(raw: str, layer: Layer, what: str = "member") -> str:
    """Normalise a member name ('' for the root); reject traversal, bad encoding, overlength."""
    try:
        return rules.member_path(raw)
    except rules.RuleError as exc:
        shown = raw.encode("utf-8", "surrogateescape") if exc.rule == "encoding" else raw[:80]
        raise LayerError(
            f"{layer.label}: {what} {shown!r} {exc}", fix=RULE_FIXES[exc.rule]
        ) from None


@dataclass
class Member:
    """One tar member of a layer: ``info.name`` is normalised; ``open()`` gives its data."""

    ordinal: int
    info: tarfile.TarInfo
    open: Callable[[], Data]


@contextlib.contextmanager
def _tar_stream(
    layer: Layer, budget: Budget, progress
) -> Iterator[tuple[tarfile.TarFile | None, _Forward, Callable]]:
    import zstandard
    from isal import igzip_threaded

    blob = layer.blob
    comp = _compression(layer)
    with contextlib.ExitStack() as stack:
        raw = _RangeReader(blob.path, blob.offset, blob.size, layer.digest, progress)
        stack.callback(raw.close)
        if comp == "gzip":
            plain = igzip_threaded.open(raw, "rb", threads=1)
            stack.callback(plain.close)
        elif comp == "zstd":
            plain = zstandard.ZstdDecompressor().stream_reader(
                raw,  # type: ignore[arg-type]  # it calls read() only, as igzip's reader does
                read_across_frames=True,
                closefd=False,
            )
        else:
            plain = raw
        counted = _CountingReader(plain, budget, blob.size, layer.diff_id, layer)
        # BufferedReader calls readinto, readable and closed only, which it has; the stub asks
        # for a whole raw stream (seek, tell, truncate, flush, close).
        buffered = io.BufferedReader(counted, CHUNK)  # type: ignore[type-var]
        stream = _Forward(buffered)
        tf = open_tar(stream) if buffered.peek(1) else None  # a zero-length layer holds nothing

        def finish() -> None:
            problem = counted.finish() or raw.finish()
            if problem:
                raise LayerError(
                    f"{layer.label}: {problem}",
                    fix="the blob is corrupt or was tampered with, export the image again",
                )

        yield tf, stream, finish


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

    def rest_from(self, offset: int) -> Iterator[bytes]:
        self.seek(offset)
        while chunk := self.read(CHUNK):
            yield chunk


@contextlib.contextmanager
def _seekable_tar(
    layer: Layer, progress
) -> Iterator[tuple[tarfile.TarFile | None, _Window, Callable]]:
    """Headers only, seeking over the data (the full pass verifies the digest)."""
    with open_regular(layer.blob.path, "the layer blob") as fh:
        window = _Window(fh, layer.blob.offset, layer.blob.size)
        tf = open_tar(window) if layer.blob.size else None

        def finish() -> None:
            if progress:
                progress(layer.blob.size)

        yield tf, window, finish


def iter_members(
    layer: Layer, budget: Budget, *, progress=None, headers_only: bool = False
) -> Iterator[Member]:
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
        with (
            _seekable_tar(layer, progress) if seek else _tar_stream(layer, budget, progress) as (
                tf,
                stream,
                finish,
            )
        ):
            ordinal = 0
            while tf is not None and (info := tf.next()) is not None:
                forget_members(tf)  # stream mode would otherwise keep every header
                last = info.name
                budget.members += 1
                if budget.members > budget.limits.max_members:
                    raise LayerError(
                        f"{layer.label}: "
                        f"more than --max-members {budget.limits.max_members} members at {last!r}",
                        fix="raise --max-members if the image is genuine",
                    )
                _check_member(info, layer, budget.limits)
                yield Member(ordinal, info, functools.partial(_member_data, tf, info, layer))
                ordinal += 1
            if tf is not None:
                _check_end(tf.offset, stream, layer, last)
            finish()
    except KitError:
        raise
    except read_errors() as exc:
        raise LayerError(
            f"{layer.label}: truncated or corrupt near member {last!r}: {exc}",
            fix="export the image again",
        ) from exc


def _check_member(info: tarfile.TarInfo, layer: Layer, limits: Limits) -> None:
    """Normalise the names; refuse what no writer can store or what no layer can hold."""
    info.name = safe_name(info.name, layer)
    if info.islnk():
        info.linkname = safe_name(info.linkname, layer, f"hard link {info.name!r} target")
    elif info.issym() and (problem := rules.symlink_target_problem(info.linkname)):
        raise LayerError(
            f"{layer.label}: symlink {info.name!r} {problem}", fix="rebuild the layer without it"
        )
    mtime = info.mtime
    if not rules.mtime_ok(mtime):
        raise LayerError(
            f"{layer.label}: member {info.name!r} has mtime {str(mtime)[:40]} in its header, "
            "not a time between 1970 and 2106",
            fix="rebuild the layer with real timestamps (e.g. SOURCE_DATE_EPOCH)",
        )
    if info.size > limits.max_size:
        raise LayerError(
            f"{layer.label}: member {info.name!r} says it holds {info.size} bytes, "
            f"more than --max-size {limits.max_size}",
            fix="raise --max-size if the image is genuine",
        )


def _check_end(offset: int, stream: _Forward | _Window, layer: Layer, last: str) -> None:
    """tarfile ends quietly at a header it cannot parse: only zero blocks may follow it."""
    bad = first_nonzero(stream.rest_from(offset), offset)
    if bad is not None:
        raise LayerError(
            f"{layer.label}: corrupt tar header at byte {offset} of the layer (after member {last!r}, "
            f"non-zero data at byte {bad}): the members after it would be lost",
            fix="export the image again",
        )


def _member_data(tf: tarfile.TarFile, info: tarfile.TarInfo, layer: Layer) -> Data:
    data = tf.extractfile(info)
    if data is None:  # a link or special file: only a regular file's data is ever asked for
        raise LayerError(f"{layer.label}: member {info.name!r} has no data to read")
    return _Guarded(data, layer, info.name)


class _Guarded:
    """A member's data whose read errors name the layer and member (the writer only reads)."""

    def __init__(self, inner: IO[bytes], layer: Layer, name: str):
        self.inner, self.layer, self.name = inner, layer, name

    def read(self, n: int = -1) -> bytes:
        try:
            return self.inner.read(n)
        except KitError:
            raise
        except read_errors() as exc:
            raise LayerError(
                f"{self.layer.label}: member {self.name!r}: truncated or corrupt data ({exc})",
                fix="export the image again",
            ) from None

    def close(self) -> None:
        self.inner.close()


def _walk_dir(layer: Layer, budget: Budget) -> Iterator[Member]:
    """A root-filesystem directory as tar members: sorted, parents first, symlinks not followed.

    Iterative (a deep tree must not exhaust Python's recursion limit); a file is opened
    without following a symlink and only if it is still a regular file.
    """
    root = layer.blob.path
    inodes: dict[tuple[int, int], str] = {}
    ordinal = 0
    pending: list[Iterator[os.DirEntry]] = []
    try:
        pending.append(iter(_sorted_dir(root, "")))
        while pending:
            entry = next(pending[-1], None)
            if entry is None:
                pending.pop()
                continue
            rel = os.path.relpath(entry.path, root)
            name = safe_name(rel, layer)
            info = _dir_member(entry, name, inodes)
            if info is None:
                continue  # sockets cannot be archived
            _check_member(info, layer, budget.limits)
            budget.members += 1
            budget.size += info.size
            if budget.members > budget.limits.max_members or budget.size > budget.limits.max_size:
                raise LayerError(
                    f"{layer.label}: {root} is past --max-members/--max-size at {name!r}",
                    fix="raise the limit if the tree is genuine",
                )
            yield Member(ordinal, info, functools.partial(_open_file, entry.path, name, layer))
            ordinal += 1
            if info.isdir():
                pending.append(iter(_sorted_dir(root, name)))
    except OSError as exc:
        raise LayerError(
            f"{layer.label}: cannot read {exc.filename or root}: {exc.strerror}",
            fix="check the tree's permissions and path lengths",
        ) from None


def _sorted_dir(root: Path, rel: str) -> list[os.DirEntry]:
    with os.scandir(root / rel if rel else root) as it:
        return sorted(it, key=lambda e: e.name)


def _dir_member(
    entry: os.DirEntry, name: str, inodes: dict[tuple[int, int], str]
) -> tarfile.TarInfo | None:
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
        return None
    return info


def _open_file(path: str, name: str, layer: Layer) -> IO[bytes]:
    """A tree's file, refused if it became a symlink, FIFO or device since it was listed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise LayerError(
            f"{layer.label}: cannot read {name!r}: {exc.strerror} (changed while converting?)",
            fix="convert a tree nobody is modifying",
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise LayerError(
            f"{layer.label}: {name!r} is now {kind_name(mode)} (changed while converting?)",
            fix="convert a tree nobody is modifying",
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
