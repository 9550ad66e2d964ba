"""The MPI reader's parsers on hostile bytes: a real MPI library with flipped or cut bytes in
its headers and tables, and generated or mutated linker caches. Whatever the bytes, the ELF
reader raises nothing but ValueError (ElfError), the cache parser nothing but LdCacheError,
and the whole reader (`find_image_mpi`) nothing but KitError; none of them loops."""

from __future__ import annotations

import shutil
from functools import lru_cache
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kit.errors import KitError
from kit.mpi import find_image_mpi
from kit.mpi.elf import elf_facts, open_elf
from kit.mpi.ldcache import NEW_ENTRY, NEW_HEADER, NEW_MAGIC, LdCacheError, parse_ld_cache
from tests.mpi.hostile import LIB_DIR, SYSTEM_MPICH, cache_bytes, mpich_tree
from tests.support.parts import require

FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@lru_cache(maxsize=1)
def library() -> tuple[bytes, dict[str, tuple[int, int]]]:
    """The system's MPICH and the (offset, size) of the regions a parser trusts: the ELF header,
    each section header, and the sections that hold counts, offsets and names."""
    require(SYSTEM_MPICH.is_file(), "Debian MPICH not installed (libmpich12)")
    data = SYSTEM_MPICH.read_bytes()
    with open(SYSTEM_MPICH, "rb") as fh:
        elf = ELFFile(fh)
        regions = {"ehdr": (0, 64)}
        shoff, shentsize = elf["e_shoff"], elf["e_shentsize"]
        for i, section in enumerate(elf.iter_sections()):
            regions[f"shdr:{section.name}"] = (shoff + i * shentsize, shentsize)
            if section.name in (
                ".dynamic",
                ".dynsym",
                ".dynstr",
                ".gnu.hash",
                ".hash",
                ".symtab",
                ".strtab",
            ):
                regions[f"sec:{section.name}"] = (section["sh_offset"], section["sh_size"])
    return data, regions


def mutate(data: bytes, regions, flips, cut) -> bytes:
    out = bytearray(data)
    for region, offset, value in flips:
        start, size = regions[region]
        at = start + offset % max(1, size)
        out[at : at + len(value)] = value
    if cut is not None:
        region, offset = cut
        start, size = regions[region]
        del out[start + offset % max(1, size) :]
    return bytes(out)


REGION_NAMES = [
    "ehdr",
    "shdr:.dynamic",
    "shdr:.dynsym",
    "shdr:.dynstr",
    "shdr:.gnu.hash",
    "sec:.dynamic",
    "sec:.dynsym",
    "sec:.dynstr",
    "sec:.gnu.hash",
]
FLIPS = st.lists(
    st.tuples(
        st.sampled_from(REGION_NAMES), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=8)
    ),
    max_size=6,
)
CUTS = st.none() | st.tuples(st.sampled_from(REGION_NAMES), st.integers(0, 1 << 20))
# Known attacks, named: ELF64 e_shnum is at 60, sh_offset at 24, sh_size at 32, sh_link at 40,
# sh_entsize at 56; the GNU hash table starts with nbuckets.
ATTACKS = {
    "zero-entsize": ([("shdr:.dynsym", 56, bytes(8))], None),
    "huge-section-count": ([("ehdr", 60, b"\xff\xff")], None),
    "extended-section-count": (
        [("ehdr", 60, b"\0\0"), ("shdr:", 32, (1 << 40).to_bytes(8, "little"))],
        None,
    ),
    "section-past-the-end": ([("shdr:.dynamic", 24, b"\xff" * 7 + b"\x00")], None),
    "huge-section-size": ([("shdr:.dynsym", 32, b"\xff" * 7 + b"\x00")], None),
    "bad-string-table-link": ([("shdr:.dynsym", 40, b"\xff\x00\x00\x00")], None),
    "gnu-hash-no-buckets": ([("sec:.gnu.hash", 0, bytes(4))], None),
    "gnu-hash-no-bloom": ([("sec:.gnu.hash", 8, bytes(4))], None),
    "string-offset-out": ([("sec:.dynamic", 8, b"\xff\xff\xff\x7f")], None),
    "truncated-in-header": ([], ("ehdr", 40)),
    "truncated-in-dynsym": ([], ("sec:.dynsym", 100)),
}


def defines_symbol(path: Path, name: str) -> bool:
    """The symbol lookup kit.mpi.discover makes on an image's library."""
    with open(path, "rb") as fh, open_elf(fh, str(path)) as elf:
        return elf.defines(name)


def check_elf_reader(path: Path) -> None:
    """The reader's contract on one file: facts or ValueError, symbol lookups likewise."""
    for call in (
        lambda: elf_facts(path),
        lambda: defines_symbol(path, "MPI_Init"),
        lambda: defines_symbol(path, "MPI_No_Such_Call"),
    ):
        try:
            call()
        except ValueError:
            pass


def with_attacks(test):
    for flips, cut in ATTACKS.values():
        test = example(flips=flips, cut=cut)(test)
    return test


@FUZZ
@given(flips=FLIPS, cut=CUTS)
@with_attacks
def test_mutated_mpi_library_gives_facts_or_value_error(tmp_path, flips, cut):
    data, regions = library()
    path = tmp_path / "libmpich.so.12"
    path.write_bytes(mutate(data, regions, flips, cut))
    check_elf_reader(path)


@settings(FUZZ, max_examples=12)
@given(flips=FLIPS, cut=CUTS)
@example(flips=ATTACKS["gnu-hash-no-buckets"][0], cut=None)
@example(flips=ATTACKS["zero-entsize"][0], cut=None)
def test_mutated_mpi_library_in_an_image_is_read_or_skipped(tmp_path_factory, flips, cut):
    data, regions = library()
    image = mpich_tree(tmp_path_factory.mktemp("img") / "img")
    (image / LIB_DIR / SYSTEM_MPICH.name).write_bytes(mutate(data, regions, flips, cut))
    try:
        found = find_image_mpi(image)
    except KitError:
        return
    assert found.primary is None or found.primary.real_path == f"/{LIB_DIR}/{SYSTEM_MPICH.name}"
    if found.primary is None:
        assert (
            any(SYSTEM_MPICH.name in note for note in found.notes) or found.source == "library scan"
        )


NAMES = st.one_of(
    st.sampled_from([b"libmpich.so.12", b"libmpi.so.12", b"libmpi.so.40", b"libc.so.6"]),
    st.binary(min_size=0, max_size=40),
)
PATHS = st.one_of(
    st.sampled_from(
        [
            f"/{LIB_DIR}/libmpich.so.12".encode(),
            b"/../../etc/passwd",
            b"/dev/zero",
            b"x" * 5000,
            b"/lib/\xff\xfe",
        ]
    ),
    st.binary(max_size=60),
)
CACHES = st.lists(st.tuples(NAMES, PATHS), max_size=8).map(cache_bytes)
BYTE_FLIPS = st.lists(
    st.tuples(st.integers(0, 4096), st.binary(min_size=1, max_size=4)), max_size=6
)


def flipped(data: bytes, flips, cut: int | None) -> bytes:
    out = bytearray(data)
    for at, value in flips:
        at %= max(1, len(out))
        out[at : at + len(value)] = value
    return bytes(out[:cut] if cut is not None else out)


@given(cache=CACHES, flips=BYTE_FLIPS, cut=st.none() | st.integers(0, 400))
@example(cache=b"ld.so-1.7.0", flips=[], cut=None)  # old magic, nothing after it
@example(cache=b"ld.so-1.7.0\0\xff\xff", flips=[], cut=None)  # cut inside the old count
@example(cache=b"ld.so-1.7.0\0\xff\xff\xff\x0f", flips=[], cut=None)  # old count far past the end
@example(cache=NEW_MAGIC, flips=[], cut=None)  # new magic, no header
def test_generated_and_mutated_caches_parse_or_are_refused(cache, flips, cut):
    data = flipped(cache, flips, cut)
    try:
        entries = parse_ld_cache(data)
    except LdCacheError:
        return
    assert len(entries) * NEW_ENTRY.size <= len(data)


def test_cache_without_string_terminators_is_refused_without_a_quadratic_scan():
    """Many entries all pointing at one long run of bytes without a NUL."""
    n = 20_000
    head = NEW_HEADER.pack(NEW_MAGIC, n, 0, 0, 0)
    table_end = NEW_HEADER.size + n * NEW_ENTRY.size
    data = head + NEW_ENTRY.pack(0, table_end, table_end, 0, 0) * n + b"A" * (4 << 20)
    with pytest.raises(LdCacheError, match="longer than 4096 bytes"):
        parse_ld_cache(data)


@settings(FUZZ, max_examples=20)
@given(cache=CACHES, flips=BYTE_FLIPS, cut=st.none() | st.integers(0, 400))
@example(cache=b"ld.so-1.7.0", flips=[], cut=None)
def test_mutated_cache_in_an_image_is_used_or_skipped(tmp_path_factory, cache, flips, cut):
    require(SYSTEM_MPICH.is_file(), "Debian MPICH not installed (libmpich12)")
    image = tmp_path_factory.mktemp("img")
    (image / "etc").mkdir()
    lib = image / LIB_DIR
    lib.mkdir(parents=True)
    shutil.copy(
        SYSTEM_MPICH.with_name("libmpichcxx.so.12"), lib / "libmpich.so.12"
    )  # small, no MPI_Init
    (image / "etc/ld.so.cache").write_bytes(flipped(cache, flips, cut))
    found = find_image_mpi(image)  # no MPI_Init anywhere: never a library, never an exception
    assert found.primary is None
