"""Find the MPI inside an image from its linker cache and ELF headers (nothing is executed)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kit.mpi.elf import defines_symbol, elf_facts, is_elf, vendor_and_version
from kit.mpi.imagefs import image_root, resolve_in_root, wanted
from kit.mpi.ldcache import LdCacheError, parse_ld_cache

MPI_LIB_RE = re.compile(r"^lib(mpi|mpich)\.so\.(\d+)\Z")
STANDARD_DIRS = ["lib", "lib64", "usr/lib", "usr/lib64", "usr/local/lib", "lib/x86_64-linux-gnu",
                 "usr/lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu/openmpi/lib"]
SKIP_TOP = {"proc", "sys", "dev", "tmp", "run"}
DPKG_MPI = {"libmpich12": "mpich", "libopenmpi3": "openmpi", "libmvapich2-12": "mvapich2"}


@dataclass(frozen=True)
class MPILibrary:
    """One MPI library in the image (in-image paths)."""

    name: str                # the linker-cache name, e.g. libmpich.so.12
    path: str                # where the cache points, e.g. /lib/x86_64-linux-gnu/libmpich.so.12
    real_path: str           # the file after following links
    soname: str | None
    file_version: str | None  # version suffix of the real file, e.g. 12.2.2
    vendor: str | None
    mpi_version: str | None


@dataclass
class ImageMPI:
    image: str
    source: str                                   # "ld.so.cache" or "library scan"
    libraries: list[MPILibrary] = field(default_factory=list)
    users: dict[str, list[str]] = field(default_factory=dict)  # in-image ELF path -> MPI sonames it needs
    static: list[str] = field(default_factory=list)           # ELF files with MPI linked in

    @property
    def primary(self) -> MPILibrary | None:
        """The library programs actually load: the one most users need, else the first."""
        if not self.libraries:
            return None
        wanted_names = [n for needs in self.users.values() for n in needs]
        return max(self.libraries, key=lambda lib: wanted_names.count(lib.name))


def file_version_of(real: Path, soname: str | None) -> str | None:
    """12.2.2 from libmpich.so.12.2.2; for a plain libmpi.so.12 copy, its longest sibling."""
    match = re.search(r"\.so\.(\d+(?:\.\d+)*)\Z", real.name)
    best = match.group(1) if match else None
    stem = (soname or real.name).split(".so")[0] + ".so."
    for sibling in real.parent.glob(stem + "*"):
        m = re.fullmatch(re.escape(stem) + r"(\d+(?:\.\d+)*)", sibling.name)
        if m and (best is None or (m.group(1).startswith(best) and len(m.group(1)) > len(best))):
            if sibling.resolve() == real.resolve() or sibling.stat().st_size == real.stat().st_size:
                best = m.group(1)
    return best


def _dpkg_versions(root: Path) -> dict[str, str]:
    status = root / "var/lib/dpkg/status"
    if not status.is_file():
        return {}
    found = {}
    for block in status.read_text(errors="replace").split("\n\n"):
        fields = dict(re.findall(r"^(Package|Version|Status): (.*)$", block, re.M))
        vendor = DPKG_MPI.get(fields.get("Package", ""))
        if vendor and "installed" in fields.get("Status", "installed"):
            found[vendor] = re.sub(r"^\d+:", "", fields.get("Version", "")).split("-")[0].split("+")[0]
    return found


def _candidates(root: Path) -> tuple[str, list[tuple[str, str]]]:
    cache = root / "etc/ld.so.cache"
    if cache.is_file():
        try:
            entries = parse_ld_cache(cache.read_bytes())
            return "ld.so.cache", [(e.name, e.path) for e in entries if MPI_LIB_RE.match(e.name)]
        except LdCacheError:
            pass
    found = []
    for rel in STANDARD_DIRS:
        directory = root / rel
        if directory.is_dir():
            found += [(p.name, f"/{rel}/{p.name}") for p in sorted(directory.iterdir())
                      if MPI_LIB_RE.match(p.name)]
    return "library scan", found


def _elf_files(root: Path):
    """ELF files on MPI-looking paths (the tree is walked without following links)."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in SKIP_TOP]
        for name in filenames:
            path = Path(dirpath) / name
            rel = "/" + os.path.relpath(path, root)
            if wanted(rel) and not path.is_symlink() and is_elf(path):
                yield rel, path


def inspect_root(root: Path, label: str) -> ImageMPI:
    source, candidates = _candidates(root)
    result = ImageMPI(image=label, source=source)
    dpkg = _dpkg_versions(root)
    seen: set[tuple[str, str]] = set()
    for name, path in candidates:
        real = resolve_in_root(root, path)
        if real is None or not real.is_file():
            continue
        real_rel = "/" + os.path.relpath(real, root)
        if (name, real_rel) in seen:  # the cache may list a library once per hwcap dir
            continue
        seen.add((name, real_rel))
        try:
            facts = elf_facts(real)
            if not defines_symbol(real, "MPI_Init"):
                continue
        except ValueError:
            continue
        vendor, version = vendor_and_version(real)
        version = version or dpkg.get(vendor or "")
        result.libraries.append(MPILibrary(name, path, real_rel, facts.soname,
                                           file_version_of(real, facts.soname), vendor, version))
    mpi_names = {lib.name for lib in result.libraries} | {lib.soname for lib in result.libraries if lib.soname}
    for rel, path in _elf_files(root):
        try:
            facts = elf_facts(path)
        except ValueError:
            continue
        needs = [n for n in facts.needed if n in mpi_names or MPI_LIB_RE.match(n)]
        if needs:
            result.users[rel] = needs
        elif not result.libraries and not (facts.soname and facts.soname.startswith(("libmpi", "libpmpi"))):
            # no shared MPI: is it linked in? MPI_Init defined here, or (stripped) an MPI banner
            # in its bytes; only asked then, since it reads whole files
            if defines_symbol(path, "MPI_Init") or vendor_and_version(path)[0] is not None:
                result.static.append(rel)
    return result


def find_image_mpi(image: str | os.PathLike) -> ImageMPI:
    """The MPI libraries of ``image`` (dir, tarball or SquashFS), their users and static copies."""
    with image_root(image) as root:
        return inspect_root(root, str(image))
