"""The ABI rules and the low-level readers, on real files of this machine."""

import re
import subprocess
from pathlib import Path

import pytest

from kit.mpi.abi import AbiId, decide
from kit.mpi.elf import elf_facts, open_elf
from kit.mpi.ldcache import LdCacheError, parse_ld_cache
from kit.site.probe import ldconfig
from tests.support.parts import require

INTEL = AbiId("intel", "2021.19.0", "libmpi.so.12", "12.0.0")
MPICH_DEBIAN = AbiId("mpich", "4.0.2", "libmpich.so.12", "12.2.2")
MPICH_OLD = AbiId("mpich", "3.3", "libmpi.so.12", "12.0.5")
OPENMPI = AbiId("openmpi", "4.1.4", "libmpi.so.40", "40.30.4")


def test_ld_cache_parser_agrees_with_ldconfig():
    require(Path("/etc/ld.so.cache").is_file(), "no /etc/ld.so.cache")
    ours = {(e.name, e.path) for e in parse_ld_cache(Path("/etc/ld.so.cache").read_bytes())}
    listed = subprocess.run([ldconfig(), "-p"], capture_output=True, text=True, check=True).stdout
    theirs = set(re.findall(r"^\s+(\S+) \(.*\) => (\S+)$", listed, re.M))
    assert ours == theirs and len(ours) > 50


def test_ld_cache_parser_refuses_garbage_and_truncation():
    with pytest.raises(LdCacheError, match="bad magic"):
        parse_ld_cache(b"not a cache at all")
    data = Path("/etc/ld.so.cache").read_bytes()
    with pytest.raises(LdCacheError):
        parse_ld_cache(data[:100])


def _symbol_and_banner(path: Path, name: str) -> tuple[bool, tuple[str | None, str | None]]:
    """Whether the library defines ``name``, and its vendor and version, read as kit mpi pair reads
    them.
    """
    with open(path, "rb") as fh, open_elf(fh, str(path)) as elf:
        return elf.defines(name), elf.banner()


def test_elf_facts_and_banners_of_real_libraries():
    lib = Path("/usr/lib/x86_64-linux-gnu/libmpich.so.12")
    require(lib.exists(), "Debian MPICH not installed")
    assert elf_facts(lib).soname == "libmpich.so.12"
    assert (
        _symbol_and_banner(lib, "MPI_Init")[0]
        and not _symbol_and_banner(lib, "MPI_No_Such_Call")[0]
    )
    cxx = Path("/usr/lib/x86_64-linux-gnu/libmpichcxx.so.12")
    assert not _symbol_and_banner(cxx, "MPI_Init")[0]  # imports it
    assert _symbol_and_banner(lib, "MPI_Init")[1] == (
        "mpich",
        subprocess.run(
            ["mpichversion", "--version"], capture_output=True, text=True
        ).stdout.split()[-1],
    )
    with pytest.raises(ValueError, match="not a readable ELF"):
        elf_facts(Path(__file__))


def test_debian_mpich_pairs_with_intel_through_an_alias_and_warns_on_minor():
    v = decide(INTEL, MPICH_DEBIAN, "full")
    assert v.ok and v.aliases == {"libmpich.so.12": "libmpi.so.12"}
    assert any("older than the image's minor 2" in w for w in v.warnings)


def test_strict_refuses_a_newer_image_minor_and_major_mode_ignores_it():
    strict = decide(INTEL, MPICH_DEBIAN, "strict")
    assert not strict.ok and any(
        "minor versions differ: host 0, image 2" in r for r in strict.reasons
    )
    assert "libmpi.so.12" in strict.advice
    major = decide(INTEL, MPICH_DEBIAN, "major")
    assert major.ok and not major.warnings


def test_equal_or_older_image_minor_is_clean():
    assert decide(INTEL, MPICH_OLD, "strict").ok
    v = decide(MPICH_DEBIAN, MPICH_OLD, "full")
    assert v.ok and not v.warnings and any("host minor 2 >= image minor 0" in r for r in v.reasons)


def test_open_mpi_is_its_own_family():
    v = decide(INTEL, OPENMPI, "full")
    assert not v.ok and "ABI families differ" in v.reasons[0]
    assert "MPICH" in v.advice and "libmpi.so.12" in v.advice
    newer = AbiId("openmpi", "4.1.5", "libmpi.so.40", "40.30.5")
    assert not decide(OPENMPI, AbiId("openmpi", "4.0.3", "libmpi.so.40", "40.20.3"), "strict").ok
    assert not decide(AbiId("openmpi", "4.0.3", "libmpi.so.40", "40.20.3"), OPENMPI, "full").ok
    assert decide(OPENMPI, newer, "full").warnings  # an older release of the same series


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="major, full, strict"):
        decide(INTEL, MPICH_OLD, "loose")
