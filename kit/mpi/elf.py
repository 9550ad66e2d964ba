"""Facts about one ELF file, read (never executed) by a small parser that trusts no header.

Why not pyelftools here: an image can ship a library whose hash chains loop, whose counts
point far past the end of the file or whose entry sizes are zero; a general-purpose reader
follows them into an endless chain walk, huge allocations or a dozen exception types. This
reader uses only the section table, checks every offset, size and count against the file's
size before using it and scans symbol tables linearly, so its work is bounded by the size of
the file, which is mapped rather than read. Every failure is an ElfError.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kit.site.model import vendor_named_in

ELF_MAGIC = b"\x7fELF"
MAX_ELF_SIZE = 1 << 30  # larger "libraries" are not read (Intel MPI's libmpi is ~80 MB)
MAX_SECTIONS = 1 << 16  # shared libraries have dozens; more is a forged count
MAX_NAME = 4096  # longest SONAME/NEEDED/symbol string looked at
SHT_SYMTAB, SHT_DYNAMIC, SHT_NOBITS, SHT_DYNSYM = 2, 6, 8, 11
DT_NULL, DT_NEEDED, DT_SONAME = 0, 1, 14
# Version banners each MPI compiles into its library (read from .rodata as plain bytes).
VERSION_PATTERNS = [
    ("intel", re.compile(rb"Intel\(R\) MPI Library %s for Linux\* OS\n?\x00(\d{4}(?:\.\d+)+)\x00")),
    (
        "intel",
        re.compile(
            rb"Intel\(R\) MPI Library (?:for Linux\* OS, )?Version (\d{4}(?:\.\d+)*(?: Update \d+)?)"
        ),
    ),
    ("openmpi", re.compile(rb"Open MPI v(\d+\.\d+(?:\.\d+)?)")),
    ("mvapich2", re.compile(rb"MVAPICH2 Version:\s*(\d[0-9.a-z]*)")),
    # MPICH keeps its libtool ABI, release date and version as adjacent strings.
    (
        "mpich",
        re.compile(
            rb"\x00\d+:\d+:\d+\x00+[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d [\d:]{8} [A-Z]+ "
            rb"\d{4}\x00(\d+\.\d+(?:\.\d+)?(?:[a-z]+\d*)?)\x00"
        ),
    ),
]


class ElfError(ValueError):
    """Not an ELF file this reader can use; the message says what is wrong with it."""


@dataclass(frozen=True)
class ElfFacts:
    soname: str | None
    needed: tuple[str, ...]


@dataclass(frozen=True)
class _Section:
    index: int
    type: int
    offset: int
    size: int
    link: int


class Elf:
    """One ELF image in memory (usually an mmap); sections are checked when first used."""

    def __init__(self, data, label: str = "ELF file"):
        self.data, self.label = data, label
        if len(data) < 16 or data[:4] != ELF_MAGIC:
            raise ElfError(f"{label}: not a readable ELF file (no ELF magic)")
        if data[4] not in (1, 2) or data[5] not in (1, 2):
            raise ElfError(f"{label}: unknown ELF class {data[4]} or byte order {data[5]}")
        e, wide = ("<" if data[5] == 1 else ">"), data[4] == 2
        header = struct.Struct(e + ("16xHHIQQQIHHHHHH" if wide else "16xHHIIIIIHHHHHH"))
        self._sh = struct.Struct(e + ("IIQQQQIIQQ" if wide else "IIIIIIIIII"))
        self._sym = struct.Struct(e + ("IBBHQQ" if wide else "IIIBBH"))
        self._shndx = 3 if wide else 5  # st_shndx's place in a symbol tuple
        self._dyn = struct.Struct(e + ("qQ" if wide else "iI"))
        if len(data) < header.size:
            raise ElfError(f"{label}: truncated ELF header")
        fields = header.unpack_from(data, 0)
        self.sections = self._section_table(shoff=fields[5], entsize=fields[10], count=fields[11])

    def _section_table(self, shoff: int, entsize: int, count: int) -> list[_Section]:
        if shoff == 0:
            return []
        size = len(self.data)
        if entsize < self._sh.size:
            raise ElfError(f"{self.label}: section header size {entsize} is below {self._sh.size}")
        if count == 0:  # more than 0xff00 sections: the real count is in section 0's sh_size
            if shoff + entsize > size:
                raise ElfError(
                    f"{self.label}: section table offset {shoff} is past the end ({size} bytes)"
                )
            count = self._sh.unpack_from(self.data, shoff)[5]
        if count > MAX_SECTIONS:
            raise ElfError(
                f"{self.label}: {count} sections claimed, more than the {MAX_SECTIONS} this reader takes"
            )
        if shoff + count * entsize > size:
            raise ElfError(
                f"{self.label}: section table ({count} entries at offset {shoff}) "
                f"runs past the end of the file ({size} bytes)"
            )
        out = []
        for i in range(count):
            _name, kind, _flags, _addr, offset, length, link, _info, _align, _ent = (
                self._sh.unpack_from(self.data, shoff + i * entsize)
            )
            out.append(_Section(index=i, type=kind, offset=offset, size=length, link=link))
        return out

    def _bytes(self, section: _Section) -> bytes:
        if section.type == SHT_NOBITS:
            return b""
        if section.offset + section.size > len(self.data):
            raise ElfError(
                f"{self.label}: section {section.index} (offset {section.offset}, "
                f"size {section.size}) runs past the end of the file ({len(self.data)} bytes)"
            )
        return self.data[section.offset : section.offset + section.size]

    def _linked(self, section: _Section) -> bytes:
        """The string table a dynamic or symbol section names in sh_link."""
        if not 0 < section.link < len(self.sections):
            raise ElfError(
                f"{self.label}: section {section.index} links to section {section.link}, "
                f"which does not exist"
            )
        return self._bytes(self.sections[section.link])

    def _string(self, table: bytes, offset: int) -> str:
        end = table.find(b"\0", offset, offset + MAX_NAME) if offset < len(table) else -1
        if end < 0:
            raise ElfError(
                f"{self.label}: string at offset {offset} is outside its table or unterminated"
            )
        return table[offset:end].decode("utf-8", "replace")

    def facts(self) -> ElfFacts:
        """SONAME and DT_NEEDED from the dynamic section(s)."""
        soname, needed = None, []
        for section in self.sections:
            if section.type != SHT_DYNAMIC:
                continue
            strings, body = self._linked(section), self._bytes(section)
            whole = len(body) - len(body) % self._dyn.size
            for tag, value in self._dyn.iter_unpack(body[:whole]):
                if tag == DT_NULL:
                    break
                if tag == DT_NEEDED:
                    needed.append(self._string(strings, value))
                elif tag == DT_SONAME:
                    soname = self._string(strings, value)
        return ElfFacts(soname, tuple(needed))

    def defines(self, name: str) -> bool:
        """Whether ``name`` is defined here (not imported), in .dynsym or .symtab."""
        wanted = name.encode() + b"\0"
        for section in self.sections:
            if section.type not in (SHT_DYNSYM, SHT_SYMTAB):
                continue
            strings = self._linked(section)
            offsets = set()
            at = strings.find(wanted)
            while at >= 0:  # the name's places in the table (also as the tail of a longer name)
                offsets.add(at)
                at = strings.find(wanted, at + 1)
            if not offsets:
                continue
            body = self._bytes(section)
            whole = len(body) - len(body) % self._sym.size
            if any(
                sym[0] in offsets and sym[self._shndx] != 0
                for sym in self._sym.iter_unpack(body[:whole])
            ):
                return True
        return False

    def banner(self) -> tuple[str | None, str | None]:
        """The MPI vendor and version banner compiled into the file, from its bytes."""
        for vendor, pattern in VERSION_PATTERNS:
            if match := pattern.search(self.data):
                return vendor, match.group(1).decode("ascii", "replace").strip(".")
        return vendor_named_in(self.data), None


@contextlib.contextmanager
def open_elf(fh, label: str) -> Iterator[Elf]:
    """The ELF in the open regular file ``fh``, mapped read-only for the block's duration."""
    st = os.fstat(fh.fileno())
    if not stat.S_ISREG(st.st_mode):
        raise ElfError(f"{label}: not a regular file")
    if st.st_size > MAX_ELF_SIZE:
        raise ElfError(
            f"{label}: {st.st_size} bytes, more than the {MAX_ELF_SIZE} this reader takes"
        )
    if st.st_size < 16:
        raise ElfError(f"{label}: not a readable ELF file ({st.st_size} bytes)")
    try:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise ElfError(f"{label}: cannot map it ({exc})") from None
    with mapped:
        yield Elf(mapped, label)


def is_elf(fh) -> bool:
    """Whether an open file starts with the ELF magic (reads 4 bytes from its start)."""
    return os.pread(fh.fileno(), 4, 0) == ELF_MAGIC


@contextlib.contextmanager
def _host_elf(path: Path) -> Iterator[Elf]:
    """A host file (the site's MPI, tests): opened without blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ElfError(f"{path}: cannot open it ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh, open_elf(fh, str(path)) as elf:
        yield elf


def elf_facts(path: Path) -> ElfFacts:
    """SONAME and DT_NEEDED of a file; ElfError (a ValueError) if not a usable ELF."""
    with _host_elf(path) as elf:
        return elf.facts()
