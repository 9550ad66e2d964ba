"""Tar headers parsed with bounds, and archives read to their real end.

Python 3.11's tarfile trusts what a header says: a negative size (base-256) or pax ``size``
moves the next header backwards (an endless loop over a seekable file), a pax header of any
size is read into memory and parsed by regexes that take quadratic time, and a corrupt
header after the first one silently ends the archive (every later member is lost). The
TarInfo subclass here refuses the first two; ``first_nonzero`` lets callers refuse the last.
It is the one tar reader of `kit image convert`/`inspect` and of `kit mpi pair`/`check` (standard
library only: the core reads Charliecloud tarballs without the [convert] extra).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from typing import Protocol

from kit.archive_rules import MAX_META, RuleError, parse_pax

_META_TYPES = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
_PAX_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)


class TarBoundsError(tarfile.ReadError):
    """A header that would make the reader loop, seek backwards or parse without bound."""


class CheckedInfo(tarfile.TarInfo):
    """A TarInfo whose parsing refuses what would make tarfile's work unbounded."""

    def _proc_member(self, tarfile_):
        # tarfile documents _proc_member as the hook for subclasses.
        if self.size < 0:
            raise TarBoundsError(f"header at byte {self.offset} has a negative size ({self.size})")
        if self.type in _META_TYPES and self.size > MAX_META:
            raise TarBoundsError(
                f"header at byte {self.offset} has a {self.size}-byte extended "
                f"header (more than {MAX_META})"
            )
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise TarBoundsError(
                f"header at byte {self.offset} is a GNU sparse file (not supported in images)"
            )
        member = super()._proc_member(tarfile_)
        if member.size < 0:  # a global pax header may set it after the offset was computed
            raise TarBoundsError(f"header at byte {member.offset}: size {member.size} is negative")
        return member

    def _proc_pax(self, tarfile_):
        """tarfile's own parser is quadratic on crafted records: parse them here, linearly."""
        buf = tarfile_.fileobj.read(self._block(self.size))
        if len(buf) < self.size:
            raise tarfile.ReadError(f"header at byte {self.offset}: unexpected end of data")
        try:
            records = parse_pax(buf[: self.size], self.offset)
        except RuleError as exc:
            raise TarBoundsError(str(exc)) from None
        headers = (
            tarfile_.pax_headers if self.type == tarfile.XGLTYPE else tarfile_.pax_headers.copy()
        )
        if b"hdrcharset" in records:
            headers["hdrcharset"] = records[b"hdrcharset"].decode("utf-8", "surrogateescape")
        binary = headers.get("hdrcharset") == "BINARY"
        for raw_key, raw_value in records.items():
            key = self._decode_pax_field(raw_key, "utf-8", "utf-8", tarfile_.errors)
            enc = tarfile_.encoding if binary and key in tarfile.PAX_NAME_FIELDS else "utf-8"
            headers[key] = self._decode_pax_field(
                raw_value, enc, tarfile_.encoding, tarfile_.errors
            )
        if any(key.startswith("GNU.sparse.") for key in headers):
            raise TarBoundsError(
                f"header at byte {self.offset} describes a GNU sparse file "
                "(not supported in images)"
            )
        try:
            member = self.fromtarfile(tarfile_)
        except tarfile.HeaderError as exc:
            raise tarfile.SubsequentHeaderError(str(exc)) from None
        if self.type in (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE):
            member._apply_pax_info(headers, tarfile_.encoding, tarfile_.errors)
            member.offset = self.offset
            if member.size < 0:
                raise TarBoundsError(
                    f"header at byte {self.offset}: pax size {member.size} is negative"
                )
            if "size" in headers and (member.isreg() or member.type not in tarfile.SUPPORTED_TYPES):
                tarfile_.offset = member.offset_data + member._block(member.size)
        return member


class Readable(Protocol):
    """What tarfile's reading modes use of a file object: a file, or a view of a layer's bytes."""

    def read(self, n: int = -1, /) -> bytes: ...

    def seek(self, pos: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...


def open_tar(fileobj: Readable, compressed: bool = False) -> tarfile.TarFile:
    """A reading TarFile over FILEOBJ whose headers are bounds-checked; ``compressed`` also takes
    gzip, bzip2 and xz (tarfile's own detection: a Charliecloud ``.tar.gz``)."""
    # Reading, tarfile calls read, seek and tell only; its stub asks write and close too.
    return tarfile.open(  # type: ignore[call-overload]
        fileobj=fileobj, mode="r:*" if compressed else "r:", tarinfo=CheckedInfo, errorlevel=2
    )


def first_nonzero(chunks: Iterable[bytes], start: int) -> int | None:
    """Offset of the first non-zero byte in CHUNKS (which begin at START), or None.

    Past tar's end-of-archive there may only be zero blocks: anything else is a header
    tarfile could not parse, and the members from there on would be lost without a word.
    """
    pos = start
    for chunk in chunks:
        if chunk.count(0) != len(chunk):
            return pos + len(chunk) - len(chunk.lstrip(b"\0"))
        pos += len(chunk)
    return None


def forget_members(tf: tarfile.TarFile) -> None:
    """Drop the headers a TarFile keeps of every member ``next()`` has read, so that reading an
    archive of a million members costs no memory (tarfile offers no public way to)."""
    # TarFile.members is tarfile's own list of the headers read, absent from typeshed's stubs.
    tf.members.clear()  # type: ignore[attr-defined]
