"""Read an image's /etc/ld.so.cache without running its ldconfig (glibc's binary format).

Layout from glibc's sysdeps/generic/dl-cache.h: an optional old "ld.so-1.7.0" table, then
the new "glibc-ld.so.cache1.1" header (48 bytes) and 24-byte entries whose key/value are
offsets of NUL-terminated strings, counted from the start of the new header.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
NEW_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, ext_offset
NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
OLD_ENTRY_SIZE = 12
MAX_STRING = 4096  # longest name or path looked at: a string without its NUL ends the search there


class LdCacheError(ValueError):
    """The file is not a linker cache this parser understands."""


@dataclass(frozen=True)
class CacheEntry:
    name: str  # the SONAME-style key ldconfig indexed, e.g. libmpich.so.12
    path: str  # absolute path inside the image


def _new_header_offset(data: bytes) -> int:
    if data.startswith(NEW_MAGIC):
        return 0
    if data.startswith(OLD_MAGIC):
        if len(data) < len(OLD_MAGIC) + 1 + 4:
            raise LdCacheError("truncated old-format header")
        (nlibs,) = struct.unpack_from("<I", data, len(OLD_MAGIC) + 1)
        offset = len(OLD_MAGIC) + 1 + 4 + nlibs * OLD_ENTRY_SIZE
        offset = (offset + 7) & ~7  # glibc aligns the new table to its alignment
        if data[offset : offset + len(NEW_MAGIC)] == NEW_MAGIC:
            return offset
        raise LdCacheError("old-format-only ld.so.cache (glibc < 2.x); not supported")
    raise LdCacheError("not a glibc ld.so.cache (bad magic)")


def _cstring(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset, offset + MAX_STRING) if offset < len(data) else -1
    if end < 0:
        raise LdCacheError(
            f"string at offset {offset} is outside the file or longer than {MAX_STRING} bytes"
        )
    return data[offset:end].decode("utf-8", "surrogateescape")


def parse_ld_cache(data: bytes) -> list[CacheEntry]:
    """All entries of the cache, in the file's order."""
    base = _new_header_offset(data)
    if len(data) < base + NEW_HEADER.size:
        raise LdCacheError("truncated header")
    _magic, nlibs, _strings, _flags, _ext = NEW_HEADER.unpack_from(data, base)
    if base + NEW_HEADER.size + nlibs * NEW_ENTRY.size > len(data):
        raise LdCacheError(f"header claims {nlibs} entries, more than the file holds")
    entries = []
    for i in range(nlibs):
        _f, key, value, _os, _hw = NEW_ENTRY.unpack_from(
            data, base + NEW_HEADER.size + i * NEW_ENTRY.size
        )
        entries.append(CacheEntry(_cstring(data, base + key), _cstring(data, base + value)))
    return entries
