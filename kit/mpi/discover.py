"""Find the MPI inside an image from its linker cache and ELF headers (nothing is executed).

Every file of the image is reached through kit.rootfs.Root: its symlinks are resolved inside
the image, never on the host, and a FIFO or device is never opened. What cannot be read (a
corrupt ELF or cache, a link loop, a name that is not UTF-8) is skipped with a note.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from kit.mpi.elf import ElfError, is_elf, open_elf
from kit.mpi.imagefs import note, open_image_tree, wanted
from kit.mpi.ldcache import LdCacheError, parse_ld_cache
from kit.rootfs import Root, RootError, show

MPI_LIB_RE = re.compile(r"lib(mpi|mpich)\.so\.(\d+)", re.ASCII)  # fullmatch
VERSION_SUFFIX_RE = re.compile(r"\.so\.(\d+(?:\.\d+)*)\Z", re.ASCII)
STANDARD_DIRS = [
    "lib",
    "lib64",
    "usr/lib",
    "usr/lib64",
    "usr/local/lib",
    "lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu/openmpi/lib",
]
SKIP_TOP = {"proc", "sys", "dev", "tmp", "run"}
DPKG_MPI = {"libmpich12": "mpich", "libopenmpi3": "openmpi", "libmvapich2-12": "mvapich2"}
MAX_LD_CACHE = 16 << 20  # real caches are ~100 KB
MAX_DPKG_STATUS = 64 << 20  # a full distribution's is a few MB
MAX_MPI_NAMES = 256  # MPI entries looked at (real images: a few, times their hwcap dirs)
# soname, vendor, MPI version of one file
Facts = tuple[Optional[str], Optional[str], Optional[str]]


@dataclass(frozen=True)
class MPILibrary:
    """One MPI library in the image (in-image paths)."""

    name: str  # the linker-cache name, e.g. libmpich.so.12
    path: str  # where the cache points, e.g. /lib/x86_64-linux-gnu/libmpich.so.12
    real_path: str  # the file after following links
    soname: str | None
    file_version: str | None  # version suffix of the real file, e.g. 12.2.2
    vendor: str | None
    mpi_version: str | None


@dataclass
class ImageMPI:
    image: str
    source: str  # "ld.so.cache" or "library scan"
    libraries: list[MPILibrary] = field(default_factory=list)
    # in-image ELF path -> MPI sonames it needs
    users: dict[str, list[str]] = field(default_factory=dict)
    static: list[str] = field(default_factory=list)  # ELF files with MPI linked in
    notes: list[str] = field(default_factory=list)  # what was skipped, and why

    @property
    def primary(self) -> MPILibrary | None:
        """The library programs actually load: the one most users need, else the first."""
        if not self.libraries:
            return None
        wanted_names = [n for needs in self.users.values() for n in needs]
        return max(self.libraries, key=lambda lib: wanted_names.count(lib.name))

    def note(self, text: str) -> None:
        note(self.notes, text)


def best_version(
    real_name: str, soname: str | None, siblings: Iterable[str], *, same: Callable[[str], bool]
) -> str | None:
    """12.2.2 from libmpich.so.12.2.2; for a plain libmpi.so.12 copy, its longest sibling
    (``same(name)``: is that sibling the same file?)."""
    match = VERSION_SUFFIX_RE.search(real_name)
    best = match.group(1) if match else None
    stem = (soname or real_name).split(".so")[0] + ".so."
    for name in siblings:
        if not name.startswith(stem):
            continue
        m = re.fullmatch(re.escape(stem) + r"(\d+(?:\.\d+)*)", name, re.ASCII)
        if (
            m
            and (best is None or (m.group(1).startswith(best) and len(m.group(1)) > len(best)))
            and same(name)
        ):
            best = m.group(1)
    return best


def file_version_of(real: Path, soname: str | None) -> str | None:
    """The version suffix of a host library (the site's MPI)."""
    size = real.stat().st_size

    def same(name: str) -> bool:
        try:
            sibling = real.parent / name
            return sibling.resolve(strict=True) == real.resolve() or sibling.stat().st_size == size
        except (OSError, RuntimeError):  # dangling or looping links beside it
            return False

    return best_version(real.name, soname, sorted(p.name for p in real.parent.iterdir()), same=same)


def _image_file_version(tree: Root, real_rel: str, size: int, soname: str | None) -> str | None:
    directory, name = posixpath.split(real_rel)

    def same(sibling: str) -> bool:
        try:
            found = tree.find(f"{directory}/{sibling}")
        except RootError:  # a link loop beside the library
            return False
        return found is not None and (found[0] == real_rel or found[1].st_size == size)

    return best_version(name, soname, tree.listdir(directory), same=same)


def _utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _dpkg_versions(tree: Root, result: ImageMPI) -> dict[str, str]:
    try:
        data = tree.read_regular("var/lib/dpkg/status", MAX_DPKG_STATUS)
    except RootError as exc:
        result.note(f"dpkg status not read: {exc}")
        return {}
    if data is None:
        return {}
    found = {}
    for block in data.decode("utf-8", "replace").split("\n\n"):
        fields = dict(re.findall(r"^(Package|Version|Status): ([^\n]*)", block, re.M))
        vendor = DPKG_MPI.get(fields.get("Package", ""))
        if vendor and "installed" in fields.get("Status", "installed"):
            found[vendor] = (
                re.sub(r"^\d+:", "", fields.get("Version", "")).split("-")[0].split("+")[0]
            )
    return found


def _candidates(tree: Root, result: ImageMPI) -> tuple[str, list[tuple[str, str]]]:
    try:
        data = tree.read_regular("etc/ld.so.cache", MAX_LD_CACHE)
    except RootError as exc:
        result.note(f"linker cache not read: {exc}")
        data = None
    if data is not None:
        try:
            entries = parse_ld_cache(data)
            return "ld.so.cache", [
                (e.name, e.path) for e in entries if MPI_LIB_RE.fullmatch(e.name)
            ]
        except LdCacheError as exc:
            result.note(
                f"/etc/ld.so.cache not used ({exc}); the standard library directories were scanned"
            )
    found = []
    for rel in STANDARD_DIRS:
        try:
            found += [(n, f"/{rel}/{n}") for n in tree.listdir(rel) if MPI_LIB_RE.fullmatch(n)]
        except RootError as exc:
            result.note(f"/{rel} not scanned: {exc}")
    return "library scan", found


def _library(
    tree: Root,
    name: str,
    path: str,
    dpkg: dict[str, str],
    seen: set[tuple[str, str]],
    read: dict[tuple[int, int], Facts | Exception | None],
) -> MPILibrary | None:
    """The MPI library a cache entry or scanned name points to; None if it is no MPI library.
    Each file (by inode: links and hard links alike) is read once, however many names lead to it:
    a hostile cache listing one big library under thousands of names costs one read, not
    thousands."""
    found = tree.find(path)
    if found is None:
        return None
    real_rel, st = found
    if not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            return None
        raise RootError(f"/{show(real_rel)} is not a regular file; it is not read")
    if (name, real_rel) in seen:  # the cache may list a library once per hwcap dir
        return None
    seen.add((name, real_rel))
    if not (_utf8(path) and _utf8(real_rel)):
        raise RootError(f"/{show(real_rel)}: its name is not UTF-8")
    key = (st.st_dev, st.st_ino)
    if key not in read:
        try:
            read[key] = _read_library(tree, real_rel, dpkg)
        except (RootError, ElfError) as exc:
            read[key] = exc
    facts = read[key]
    if isinstance(facts, Exception):
        raise facts
    if facts is None:
        return None
    soname, vendor, version = facts
    return MPILibrary(
        name=name,
        path=path,
        real_path="/" + real_rel,
        soname=soname,
        file_version=_image_file_version(tree, real_rel, st.st_size, soname),
        vendor=vendor,
        mpi_version=version,
    )


def _read_library(tree: Root, real_rel: str, dpkg: dict[str, str]) -> Facts | None:
    """SONAME, vendor and version of one library file; None if it defines no MPI_Init."""
    fh = tree.open_regular(real_rel, follow_last=False)
    if fh is None:  # gone since the lookup
        return None
    with fh, open_elf(fh, f"/{real_rel}") as elf:
        facts = elf.facts()
        if not elf.defines("MPI_Init"):
            return None
        vendor, version = elf.banner()
    return facts.soname, vendor, version or dpkg.get(vendor or "")


def _elf_files(root: Path, result: ImageMPI):
    """Regular files on MPI-looking paths, as in-image paths (the tree is walked without
    following links; FIFOs and devices are not opened)."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in SKIP_TOP]
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if not wanted("/" + rel):
                continue
            try:
                mode = os.lstat(os.path.join(dirpath, name)).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                continue
            if not stat.S_ISREG(mode):
                result.note(f"/{show(rel)}: not a regular file; not opened")
            elif not _utf8(rel):
                result.note(f"/{show(rel)}: its name is not UTF-8; skipped")
            else:
                yield rel


def inspect_root(root: Path, label: str, notes: Iterable[str] = ()) -> ImageMPI:
    """The MPI of the image tree at ``root`` (nothing outside it is read)."""
    with Root(root) as tree:
        return _inspect(tree, root, label, list(notes))


def _inspect(tree: Root, root: Path, label: str, notes: list[str]) -> ImageMPI:
    result = ImageMPI(image=label, source="")
    for text in notes:
        result.note(text)
    result.source, candidates = _candidates(tree, result)
    dpkg = _dpkg_versions(tree, result)
    seen: set[tuple[str, str]] = set()
    read: dict[tuple[int, int], Facts | Exception | None] = {}
    if len(candidates) > MAX_MPI_NAMES:
        result.note(
            f"{len(candidates)} MPI library names listed ({result.source}); "
            f"only the first {MAX_MPI_NAMES} were looked at"
        )
    for name, path in candidates[:MAX_MPI_NAMES]:
        try:
            lib = _library(tree, name, path, dpkg, seen, read)
        except (RootError, ElfError) as exc:
            result.note(f"skipped {show(path)}: {exc}")
            continue
        if lib is not None:
            result.libraries.append(lib)
    mpi_names = {lib.name for lib in result.libraries} | {
        lib.soname for lib in result.libraries if lib.soname
    }
    for rel in _elf_files(root, result):
        try:
            _classify(tree, rel, mpi_names, result)
        except (RootError, ElfError) as exc:
            result.note(f"skipped /{show(rel)}: {exc}")
    return result


def _classify(tree: Root, rel: str, mpi_names: set[str], result: ImageMPI) -> None:
    """Record an ELF file that needs an MPI library, or (without a shared MPI) has one linked in."""
    fh = tree.open_regular(rel, follow_last=False)
    if fh is None:
        return
    with fh:
        if not is_elf(fh):
            return
        with open_elf(fh, f"/{rel}") as elf:
            facts = elf.facts()
            needs = [n for n in facts.needed if n in mpi_names or MPI_LIB_RE.fullmatch(n)]
            if needs:
                result.users["/" + rel] = needs
            elif not result.libraries and not (
                facts.soname and facts.soname.startswith(("libmpi", "libpmpi"))
            ):
                # no shared MPI: is it linked in? MPI_Init defined here, or (stripped) an MPI banner
                # in its bytes; only asked then, since it reads whole files
                if elf.defines("MPI_Init") or elf.banner()[0] is not None:
                    result.static.append("/" + rel)


def find_image_mpi(image: str | os.PathLike, ref: str | None = None) -> ImageMPI:
    """The MPI libraries of ``image`` (dir, tarball, SquashFS, or a docker/OCI source: ``ref``
    picks one of several), their users and static copies."""
    with open_image_tree(image, ref) as tree:
        return inspect_root(tree.root, str(image), tree.notes)
