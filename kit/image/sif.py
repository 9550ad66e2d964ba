"""SIF, the Singularity Image Format (spec "01") that Apptainer runs: written and read in Python.

Why the kit writes it itself: Apptainer is rarely where images are converted (outside the
perimeter), and ``apptainer build`` stamps the time of the run into the file. A SIF here is the
kit's own SquashFS (mount points and pair links already inside) behind a header, a table of
object descriptors, a definition and a JSON labels object; its UUID is derived from that content
and its times are the image's newest mtime, so the same image gives the same bytes.

Layout, as Apptainer's own tools write it: a 128-byte header, 48 descriptors of 585 bytes at
4096, the data from 32176; the partition aligned to 4096. Little-endian, packed.

The reader checks every offset and size against the file's size and bounds every count and
every read, so a hostile file costs at most ``MAX_READ`` bytes and gives one line of error.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from kit.artifact_names import SIF_MAGIC, SIF_MAGIC_AT
from kit.errors import KitError
from kit.excerpt import printable
from kit.readfile import NotRegularFile, open_regular_fd

LAUNCH = b"#!/usr/bin/env run-singularity\n"  # what Apptainer writes; lets ./IMAGE.sif run
MAGIC, VERSION = SIF_MAGIC, b"01\0"
HEADER = struct.Struct("<32s10s3s3s16s8q")  # launch, magic, version, arch, uuid, 8 x int64
# type, used, id, group, link, 7 x int64, name, extra
DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")
PARTITION_EXTRA = struct.Struct("<ii3s")  # filesystem type, partition type, arch
DEFINITION, LABELS, PARTITION = 0x4001, 0x4003, 0x4004
TYPE_NAMES = {
    0x4001: "definition",
    0x4002: "environment",
    0x4003: "labels",
    0x4004: "partition",
    0x4005: "signature",
    0x4006: "generic JSON",
    0x4007: "generic",
    0x4008: "crypto message",
    0x4009: "SBOM",
}
FS_NAMES = {1: "squashfs", 2: "ext3", 3: "immutable object", 4: "raw", 5: "encrypted squashfs"}
PART_NAMES = {1: "system", 2: "primary system", 3: "data", 4: "overlay"}
FS_SQUASH, PART_PRIMARY = 1, 2
ARCHES = (  # SIF's two-digit codes, in order from "01", by the Go names OCI configs use
    "386 amd64 arm arm64 ppc64 ppc64le mips mipsle mips64 mips64le s390x riscv64".split()
)
GROUP = 1 | 0xF0000000  # the first object group, as Apptainer numbers it
DESCRIPTORS = 48  # slots in the table, as Apptainer's build leaves them
DESCRIPTORS_AT = 4096
DATA_AT = DESCRIPTORS_AT + DESCRIPTORS * DESCRIPTOR.size  # 32176
ALIGN = 4096  # a partition's alignment: the kernel mounts it from a loop device at an offset
UUID_SPACE = uuid.UUID("5d9f3b1e-6f4c-5a0e-9a1d-2f6b8c7e4a10")  # the kit's SIF ids (uuid5)

MAX_DESCRIPTORS = 4096  # a table far larger than any tool writes (48 by default)
MAX_TEXT = 1 << 20  # bytes of a definition or labels object worth reading
MAX_READ = HEADER.size + MAX_DESCRIPTORS * DESCRIPTOR.size + 2 * MAX_TEXT  # per file, at most
CHUNK = 1 << 20
MAX_SHOWN = 40  # definition lines kit image inspect prints


def arch_code(arch: str | None) -> bytes:
    """SIF's code for an OCI architecture name (amd64 -> b"02\\0")."""
    name = arch or "amd64"
    if name not in ARCHES:
        raise KitError(
            f"architecture {name!r}: SIF has no code for it",
            fix=f"convert an image for one of {', '.join(ARCHES)}, or write .sqfs",
        )
    return b"%02d\0" % (ARCHES.index(name) + 1)


def arch_name(code: bytes) -> str:
    """The OCI name of a SIF architecture code, or the code itself when unknown (a printer
    escapes it: kit.excerpt)."""
    text = code.rstrip(b"\0").decode("ascii", "replace")
    return ARCHES[int(text) - 1] if text.isdigit() and 1 <= int(text) <= len(ARCHES) else text


def _descriptor(
    kind: int, ident: int, offset: int, size: int, padded: int, mtime: int, extra: bytes = b""
) -> bytes:
    return DESCRIPTOR.pack(
        kind, True, ident, GROUP, 0, offset, size, padded, mtime, mtime, 0, 0, b"", extra
    )


def prefix(
    *,
    definition: bytes,
    labels: bytes,
    partition_size: int,
    partition_sha256: str,
    arch: bytes,
    mtime: int,
) -> bytes:
    """Everything of the SIF before its partition (which follows at ``len(prefix)``).

    The UUID is a name-based one (uuid5) of the definition, the labels and the partition's
    sha256: the same objects always give the same file, different ones a different id."""
    objects_end = DATA_AT + len(definition) + len(labels)
    part_at = -(-objects_end // ALIGN) * ALIGN
    ident = uuid.uuid5(
        UUID_SPACE,
        hashlib.sha256(definition).hexdigest()
        + hashlib.sha256(labels).hexdigest()
        + partition_sha256,
    )
    table = (
        _descriptor(DEFINITION, 1, DATA_AT, len(definition), len(definition), mtime)
        + _descriptor(LABELS, 2, DATA_AT + len(definition), len(labels), len(labels), mtime)
        + _descriptor(
            PARTITION,
            3,
            part_at,
            partition_size,
            partition_size + part_at - objects_end,
            mtime,
            PARTITION_EXTRA.pack(FS_SQUASH, PART_PRIMARY, arch),
        )
    )
    header = HEADER.pack(
        LAUNCH,
        MAGIC,
        VERSION,
        arch,
        ident.bytes,
        mtime,
        mtime,
        DESCRIPTORS - 3,
        DESCRIPTORS,
        DESCRIPTORS_AT,
        DESCRIPTORS * DESCRIPTOR.size,
        DATA_AT,
        part_at + partition_size - DATA_AT,
    )
    return b"".join(
        (
            header.ljust(DESCRIPTORS_AT, b"\0"),
            table.ljust(DESCRIPTORS * DESCRIPTOR.size, b"\0"),
            definition,
            labels,
            b"\0" * (part_at - objects_end),
        )
    )


def definition_text(config_digest: str | None) -> bytes:
    """The SIF's definition (``apptainer inspect --deffile`` shows it): the image it came from,
    by its config's digest only, so that a docker-archive and an OCI layout of one image give
    one SIF. Not a recipe to rebuild from: the kit converted an existing image."""
    source = f"config {config_digest}" if config_digest else "a root filesystem"
    return (
        "# Written by kit image convert from an existing image; not a recipe to build from.\n"
        f"# Source: {source}\n"
        "Bootstrap: scratch\n"
    ).encode()


def labels_json(config: dict, arch: str | None, config_digest: str | None) -> bytes:
    """The SIF's labels: the image's own (string values only) and the kit's, sorted, compact."""
    cfg = config.get("config") if isinstance(config.get("config"), dict) else {}
    own = cfg.get("Labels") if isinstance(cfg, dict) else None
    labels = {k: v for k, v in (own or {}).items() if isinstance(k, str) and isinstance(v, str)}
    labels["org.label-schema.build-arch"] = arch or "amd64"
    if config_digest:
        labels["secure-site-kit.source-config"] = config_digest
    return json.dumps(labels, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def write(
    out: IO[bytes],
    partition: Path,
    partition_sha256: str,
    *,
    definition: bytes,
    labels: bytes,
    arch: bytes,
    mtime: int,
) -> None:
    """Write the SIF to ``out`` (a fresh file of the kit's): its prefix, then ``partition``."""
    size = partition.stat().st_size
    out.write(
        prefix(
            definition=definition,
            labels=labels,
            partition_size=size,
            partition_sha256=partition_sha256,
            arch=arch,
            mtime=mtime,
        )
    )
    with open(partition, "rb") as fh:
        while block := fh.read(CHUNK):
            out.write(block)


# -- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SifObject:
    """One used descriptor: what the object is and where its bytes are."""

    ident: int
    kind: int
    offset: int
    size: int
    name: str
    group: int
    link: int
    fs: int | None = None  # partitions only
    part: int | None = None
    arch: str | None = None

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.kind, f"type 0x{self.kind:04x}")


@dataclass
class Sif:
    """A SIF's header and objects, every one checked to lie inside the file."""

    size: int
    arch: str
    uuid: str
    created: int
    modified: int
    launch: str
    objects: list[SifObject] = field(default_factory=list)
    definition: str | None = None
    labels: dict[str, Any] | None = None

    def primary(self) -> SifObject | None:
        """The primary system partition (the root filesystem Apptainer runs), if any."""
        return next(
            (o for o in self.objects if o.kind == PARTITION and o.part == PART_PRIMARY), None
        )


Pread = Callable[[int, int], bytes]  # (size, offset) -> bytes, as os.pread on an open file


def parse(pread: Pread, size: int, where: str) -> Sif:
    """A SIF from a file of ``size`` bytes read through ``pread``; KitError (one line naming
    ``where`` and the field) for anything not a well-formed SIF. Reads at most MAX_READ bytes,
    never past ``size``."""

    def bad(what: str, fix: str = "convert the image again (kit image convert SRC OUT.sif)"):
        return KitError(what, fix=fix, where=where)

    def read(offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > size:
            raise bad(
                f"{what} (bytes {offset}..{offset + length}) lies outside the file of {size} bytes"
            )
        data = pread(length, offset)
        if len(data) != length:
            raise bad(f"{what}: the file ended while reading it", fix="copy the image again")
        return data

    if size < HEADER.size:
        raise bad(f"not a SIF file: {size} bytes, shorter than its {HEADER.size}-byte header")
    (launch, magic, version, arch, ident, created, modified, free, total, table_at, table_size,
     data_at, data_size) = HEADER.unpack(read(0, HEADER.size, "header"))  # fmt: skip
    if magic != MAGIC:
        raise bad("not a SIF file (no SIF_MAGIC in its header)", fix="give a .sif image")
    if version != VERSION:
        raise bad(
            f"header version {version.rstrip(bytes(1))!r}: this kit reads SIF version 01",
            fix="rebuild the SIF with Apptainer 1.x, or convert the image again",
        )
    if not 0 < total <= MAX_DESCRIPTORS or not 0 <= free <= total:
        raise bad(f"header: {total} descriptors ({free} free); expected 1..{MAX_DESCRIPTORS}")
    if table_size != total * DESCRIPTOR.size or table_at < HEADER.size:
        raise bad(f"header: descriptor table of {table_size} bytes at {table_at}")
    if data_at < 0 or data_size < 0 or data_at + data_size > size:
        raise bad(
            f"header: data (bytes {data_at}..{data_at + data_size}) lies outside the file of {size} bytes"
        )
    table = read(table_at, table_size, "descriptor table")
    sif = Sif(
        size=size,
        arch=arch_name(arch),
        uuid=str(uuid.UUID(bytes=ident)),
        created=created,
        modified=modified,
        launch=launch.rstrip(b"\0").decode("utf-8", "replace"),
    )
    seen: set[int] = set()
    for slot in range(total):
        fields = DESCRIPTOR.unpack_from(table, slot * DESCRIPTOR.size)
        kind, used, ident_no, group, link, offset, length, padded = fields[:8]
        name, extra = fields[12], fields[13]
        if not used:
            continue
        what = f"descriptor {slot + 1} (object {ident_no})"
        if ident_no in seen or ident_no == 0:
            raise bad(f"{what}: id {ident_no} is zero or used twice")
        seen.add(ident_no)
        if offset < 0 or length < 0 or offset + length > size or padded < length:
            raise bad(
                f"{what}: {length} bytes at {offset} (padded {padded}) "
                f"do not fit the file of {size} bytes"
            )
        obj = SifObject(
            ident_no, kind, offset, length, name.split(b"\0", 1)[0].decode("utf-8", "replace"),
            group, link,
        )  # fmt: skip
        if kind == PARTITION:
            fs, part, parch = PARTITION_EXTRA.unpack_from(extra)
            obj = replace(obj, fs=fs, part=part, arch=arch_name(parch))
        sif.objects.append(obj)
    if len(sif.objects) != total - free:
        raise bad(f"header: {total - free} descriptors in use, the table has {len(sif.objects)}")
    for obj in sif.objects:
        if obj.kind == DEFINITION and sif.definition is None:
            sif.definition = _text(read(obj.offset, min(obj.size, MAX_TEXT), "definition"))
        elif obj.kind == LABELS and sif.labels is None:
            if obj.size > MAX_TEXT:
                raise bad(f"labels: {obj.size} bytes, more than {MAX_TEXT}")
            sif.labels = _labels(read(obj.offset, obj.size, "labels"), bad)
    return sif


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _labels(data: bytes, bad: Callable[..., KitError]) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (ValueError, RecursionError):
        raise bad("labels: not a JSON document") from None
    if not isinstance(value, dict):
        raise bad("labels: not a JSON object")
    return value


def read_sif(path: str | os.PathLike) -> Sif:
    """A SIF file's header and objects (kit.readfile's open: a FIFO or device is refused)."""
    try:
        fd = open_regular_fd(path)
    except NotRegularFile as exc:
        raise KitError(
            f"is {exc.kind}, not a SIF file", fix="give the .sif file", where=str(path)
        ) from None
    except OSError as exc:
        raise KitError(
            f"cannot read it ({exc.strerror})", fix="check the path and its permissions",
            where=str(path),
        ) from None  # fmt: skip
    try:
        return parse(lambda n, off: os.pread(fd, n, off), os.fstat(fd).st_size, str(path))
    finally:
        os.close(fd)


def looks_like_sif(head: bytes) -> bool:
    """A file's first bytes are a SIF header's (its magic after the 32-byte launch line)."""
    return head[SIF_MAGIC_AT : SIF_MAGIC_AT + len(MAGIC)] == MAGIC


def squashfs_at(path: str | os.PathLike) -> int:
    """Where the SIF's primary partition, a SquashFS, starts: unsquashfs -o reads it there."""
    part = read_sif(path).primary()
    if part is None or part.fs != FS_SQUASH:
        raise KitError(
            "the SIF has no SquashFS primary system partition",
            fix="convert the image again (kit image convert SRC OUT.sif)",
            where=str(path),
        )
    return part.offset


def describe(sif: Sif) -> dict[str, Any]:
    """The SIF as ``kit image inspect --json`` gives it (values as read: print them escaped)."""
    return {
        "kind": "sif",
        "architecture": sif.arch,
        "uuid": sif.uuid,
        "created": sif.created,
        "modified": sif.modified,
        "launch": sif.launch,
        "size": sif.size,
        "labels": sif.labels or {},
        "definition": sif.definition,
        "objects": [
            {
                "id": o.ident,
                "type": o.type_name,
                "offset": o.offset,
                "size": o.size,
                "name": o.name,
                "group": o.group,
                "link": o.link,
                **(
                    {
                        "filesystem": FS_NAMES.get(o.fs or 0, str(o.fs)),
                        "partition": PART_NAMES.get(o.part or 0, str(o.part)),
                        "architecture": o.arch,
                    }
                    if o.kind == PARTITION
                    else {}
                ),
            }
            for o in sif.objects
        ],
    }


def summary(sif: Sif, source: str | os.PathLike) -> list[str]:
    """``kit image inspect``'s lines for a SIF; every value read from the file escaped."""
    when = (
        datetime.fromtimestamp(sif.created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if 0 <= sif.created < 1 << 35  # past year 3000 is no date a tool wrote
        else str(sif.created)
    )
    lines = [
        f"{printable(os.fspath(source))}: SIF {printable(sif.arch, 20)}, id {sif.uuid}, "
        f"created {when}, {sif.size} bytes"
    ]
    for o in sif.objects:
        part = ""
        if o.kind == PARTITION:
            fs = FS_NAMES.get(o.fs or 0, str(o.fs))
            role = PART_NAMES.get(o.part or 0, str(o.part))
            part = f" ({fs}, {role}, {printable(o.arch, 20)})"
        name = f" {printable(o.name, 128)!s}" if o.name else ""
        lines.append(f"  object {o.ident}: {o.type_name}{part}{name}, {o.size} bytes at {o.offset}")
    for key, value in sorted((sif.labels or {}).items()):
        lines.append(f"  label {printable(key)}={printable(value)}")
    for line in (sif.definition or "").splitlines()[:MAX_SHOWN]:
        lines.append(f"  definition: {printable(line)}")
    return lines
