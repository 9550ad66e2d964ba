"""Facts about one ELF file read with pyelftools (never executed): SONAME, needs, MPI symbols."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.hash import ELFHashSection, GNUHashSection
from elftools.elf.sections import SymbolTableSection

ELF_MAGIC = b"\x7fELF"
# Version banners each MPI compiles into its library (read from .rodata as plain bytes).
VERSION_PATTERNS = [
    ("intel", re.compile(rb"Intel\(R\) MPI Library %s for Linux\* OS\n?\x00(\d{4}(?:\.\d+)+)\x00")),
    ("intel", re.compile(rb"Intel\(R\) MPI Library (?:for Linux\* OS, )?Version (\d{4}(?:\.\d+)*(?: Update \d+)?)")),
    ("openmpi", re.compile(rb"Open MPI v(\d+\.\d+(?:\.\d+)?)")),
    ("mvapich2", re.compile(rb"MVAPICH2 Version:\s*(\d[0-9.a-z]*)")),
    # MPICH keeps its libtool ABI, release date and version as adjacent strings.
    ("mpich", re.compile(rb"\x00\d+:\d+:\d+\x00+[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d [\d:]{8} [A-Z]+ \d{4}"
                         rb"\x00(\d+\.\d+(?:\.\d+)?(?:[a-z]+\d*)?)\x00")),
]
VENDOR_MARKERS = [("intel", b"Intel(R) MPI Library"), ("openmpi", b"Open MPI"),
                  ("mvapich2", b"MVAPICH2"), ("mpich", b"MPICH")]


@dataclass(frozen=True)
class ElfFacts:
    soname: str | None
    needed: tuple[str, ...]


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def elf_facts(path: Path) -> ElfFacts:
    """SONAME and DT_NEEDED; ValueError if not an ELF."""
    try:
        with open(path, "rb") as fh:
            soname, needed = None, []
            for section in ELFFile(fh).iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        if tag.entry.d_tag == "DT_SONAME":
                            soname = tag.soname
                        elif tag.entry.d_tag == "DT_NEEDED":
                            needed.append(tag.needed)
            return ElfFacts(soname, tuple(needed))
    except (ELFError, OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable ELF file: {exc}") from None


def defines_symbol(path: Path, name: str = "MPI_Init") -> bool:
    """Whether ``name`` is defined (not imported) here: hash-table lookup in .dynsym first,
    then a walk of .symtab (executables with MPI linked in rarely export it)."""
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            for section in elf.iter_sections():
                if isinstance(section, (GNUHashSection, ELFHashSection)):
                    sym = section.get_symbol(name)
                    if sym is not None and sym["st_shndx"] != "SHN_UNDEF":
                        return True
            table = elf.get_section_by_name(".symtab")
            if isinstance(table, SymbolTableSection):
                return any(sym.name == name and sym["st_shndx"] != "SHN_UNDEF"
                           for sym in table.iter_symbols())
            return False
    except (ELFError, OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable ELF file: {exc}") from None


def vendor_and_version(path: Path) -> tuple[str | None, str | None]:
    """The MPI vendor and version banner compiled into a library, from its bytes."""
    data = path.read_bytes()
    for vendor, pattern in VERSION_PATTERNS:
        if match := pattern.search(data):
            return vendor, match.group(1).decode().strip(".")
    for vendor, marker in VENDOR_MARKERS:
        if marker in data:
            return vendor, None
    return None, None
