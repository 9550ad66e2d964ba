"""Facts about one ELF file read with pyelftools (never executed): SONAME, needs, MPI symbols."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
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
    defines_mpi_init: bool  # a defined (not imported) MPI_Init symbol


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def elf_facts(path: Path) -> ElfFacts:
    """SONAME, DT_NEEDED and whether MPI_Init is defined here; ValueError if not an ELF."""
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            soname, needed = None, []
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        if tag.entry.d_tag == "DT_SONAME":
                            soname = tag.soname
                        elif tag.entry.d_tag == "DT_NEEDED":
                            needed.append(tag.needed)
            defines = False
            for name in (".dynsym", ".symtab"):
                table = elf.get_section_by_name(name)
                if not isinstance(table, SymbolTableSection):
                    continue
                for sym in table.get_symbol_by_name("MPI_Init") or []:
                    if sym["st_shndx"] != "SHN_UNDEF":
                        defines = True
            return ElfFacts(soname, tuple(needed), defines)
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
