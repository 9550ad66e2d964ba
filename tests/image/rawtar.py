"""Hand-forged tar headers: what tarfile's writer refuses to produce (negative sizes, forged
pax records, members after a corrupt header), for the hostile-archive tests."""

from __future__ import annotations

import tarfile

BLOCK = 512


def member(
    name: str,
    data: bytes = b"",
    kind: str = "f",
    linkname: str = "",
    fmt: int = tarfile.GNU_FORMAT,
    pax: dict[str, str] | None = None,
) -> bytes:
    """One member (header blocks + padded data); kind f, d, l (symlink) or h (hard link)."""
    info = tarfile.TarInfo(name)
    info.size = len(data) if kind == "f" else 0
    info.type = {
        "f": tarfile.REGTYPE,
        "d": tarfile.DIRTYPE,
        "l": tarfile.SYMTYPE,
        "h": tarfile.LNKTYPE,
    }[kind]
    info.mode = 0o755 if kind == "d" else 0o644
    info.linkname = linkname
    info.mtime = 1_700_000_000
    if pax:
        info.pax_headers = pax
    return info.tobuf(fmt, "utf-8", "surrogateescape") + padded(data if kind == "f" else b"")


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def with_size_field(header: bytes, field: bytes) -> bytes:
    """HEADER (one block) with its 12-byte size field replaced and the checksum redone."""
    block = bytearray(header[:BLOCK])
    block[124:136] = field
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block) + header[BLOCK:]


def base256(value: int) -> bytes:
    """A size field in GNU base-256 form: the only way a header can say a negative number."""
    return bytes([0xFF if value < 0 else 0x80]) + value.to_bytes(11, "big", signed=True)


def pax_member(
    name: str, records: bytes, data: bytes = b"", kind: str = "f", linkname: str = ""
) -> bytes:
    """A pax extended header with raw RECORDS (possibly malformed) followed by a member."""
    head = tarfile.TarInfo("././@PaxHeader")
    head.type, head.size = tarfile.XHDTYPE, len(records)
    return (
        head.tobuf(tarfile.USTAR_FORMAT)
        + padded(records)
        + member(name, data, kind, linkname, fmt=tarfile.USTAR_FORMAT)
    )


def pax_record(key: str, value: bytes) -> bytes:
    """One well-formed ``LEN KEY=VALUE\\n`` record (LEN counts itself)."""
    body = b" " + key.encode() + b"=" + value + b"\n"
    size = len(body) + 1
    while len(str(size)) + len(body) != size:
        size += 1
    return str(size).encode() + body


def archive(*members: bytes) -> bytes:
    """Members followed by the end-of-archive marker (two zero blocks)."""
    return b"".join(members) + bytes(2 * BLOCK)
