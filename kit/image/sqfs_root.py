"""Stamp a fresh SquashFS image's root directory with a time taken from the image.

Why: with ``-tar``, mksquashfs 4.5.1 gives the root directory the time of the run and ignores
``-root-time``; ``-all-time`` and SOURCE_DATE_EPOCH only clamp, and clamp every file too. So
two conversions of one image would differ in those four bytes. SquashWriter asks for an
uncompressed inode table (``-noI``), which makes the root inode's mtime four plain bytes that
can be set in place, before the image is hashed. Everything is checked before a byte is
written; an image not in the expected form is an error, never a guess.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

from kit.errors import KitError

_SUPER = struct.Struct("<IIIIIHHHHHHQQQQQQQQ")  # the SquashFS 4.0 superblock
_MAGIC = 0x73717368
_UNCOMPRESSED_INODES = 0x0001
_UNCOMPRESSED_BLOCK = 0x8000
_METADATA_SIZE = 8192
_DIR_TYPES = (1, 8)  # basic and extended directory inodes
# inode header: type, mode, uid, gid (u16 each), mtime, number (u32)
_MTIME_AT, _HEADER_SIZE = (
    8,
    16,
)


def set_root_mtime(path: Path, mtime: int) -> None:
    """Set the root directory's mtime of the SquashFS image at PATH (the kit's own work file)."""
    if not 0 <= mtime < 1 << 32:
        raise KitError(
            f"{path}: root mtime {mtime} does not fit SquashFS's 32 bits",
            fix="give the image's files real timestamps",
        )
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KitError(f"{path}: not a regular file", fix="remove it and convert again")
        positions = _root_header(fd, path, st.st_size)
        for pos, byte in zip(positions[_MTIME_AT : _MTIME_AT + 4], struct.pack("<I", mtime)):
            os.pwrite(fd, bytes([byte]), pos)
    finally:
        os.close(fd)


def _root_header(fd: int, path: Path, size: int) -> list[int]:
    """The file offsets of the root inode's 16 header bytes (it may span two metadata blocks)."""

    def bad(why: str) -> KitError:
        return KitError(
            f"{path}: mksquashfs wrote an image whose root inode cannot be stamped ({why})",
            fix="use squashfs-tools 4.x that honours -noI",
        )

    raw = os.pread(fd, _SUPER.size, 0)
    if len(raw) != _SUPER.size:
        raise bad("no superblock")
    fields = _SUPER.unpack(raw)
    magic, flags, major, root_ref = fields[0], fields[7], fields[9], fields[11]
    inode_start, dir_start = fields[15], fields[16]
    if magic != _MAGIC or major != 4:
        raise bad("not SquashFS 4")
    if not flags & _UNCOMPRESSED_INODES:
        raise bad("compressed inode table")
    if not _SUPER.size <= inode_start < dir_start <= size:
        raise bad("inode table outside the file")
    block, offset = inode_start + (root_ref >> 16), root_ref & 0xFFFF
    positions: list[int] = []
    while len(positions) < _HEADER_SIZE:
        if block + 2 > dir_start:
            raise bad("root inode past the inode table")
        (word,) = struct.unpack("<H", os.pread(fd, 2, block))
        length = word & ~_UNCOMPRESSED_BLOCK
        if (
            not word & _UNCOMPRESSED_BLOCK
            or not 0 < length <= _METADATA_SIZE
            or block + 2 + length > dir_start
        ):
            raise bad("compressed or oversized metadata block")
        take = range(offset, min(length, offset + _HEADER_SIZE - len(positions)))
        positions += [block + 2 + i for i in take]
        block, offset = block + 2 + length, max(0, offset - length)
    (kind,) = struct.unpack("<H", b"".join(os.pread(fd, 1, p) for p in positions[:2]))
    if kind not in _DIR_TYPES:
        raise bad(f"root inode of type {kind}")
    return positions
