"""Which host libraries a rank must load from the host MPI, from the ELF dependency closure of
libmpi and of the components it dlopens, and the links that put only those on the loader's path.

Why: binding a host library dir and putting it on LD_LIBRARY_PATH hands a rank everything that
dir holds. On Debian (/usr/lib/x86_64-linux-gnu) that is also the host's libc, libm, libstdc++,
loaded beside the image's dynamic loader. Here the dirs are still bound, but where nothing
searches them; a directory made in the image at conversion time (the pair's links, on
LD_LIBRARY_PATH alone) gets one link per library the host must provide:

- the MPI runtime's own libraries (``owned``: libmpi and what must be one version with the
  host's daemons, e.g. Open MPI's open-pal, open-rte, PMIx, libevent, hwloc, UCX);
- a library the closure needs that the image does not have (by SONAME, from its linker cache).

Every other library (libc, libm, libstdc++, libz, ...) is the image's: a SONAME promises its
ABI. Only what a host-provided library needs is followed. Work is bounded (MAX_LIBRARIES files
read, MAX_COMPONENTS components).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kit.errors import error_line
from kit.mpi.elf import ElfError, elf_facts
from kit.mpi.ldcache import LdCacheError, parse_ld_cache
from kit.rootfs import Root, RootError

MAX_LIBRARIES = 1000  # files of one closure read (Open MPI with UCX and fabrics: about 40)
MAX_COMPONENTS = 2000  # files of one component dir read (Debian's Open MPI 4.1: 121)
MAX_LD_CACHE = 16 << 20  # real caches are ~100 KB
# names of one host library dir looked at (Debian's /usr/lib/x86_64-linux-gnu: ~3000)
MAX_DIR_ENTRIES = 100_000
HOST_LD_CACHE = Path("/etc/ld.so.cache")
DEFAULT_DIRS = (Path("/lib64"), Path("/usr/lib64"), Path("/lib"), Path("/usr/lib"))


@dataclass
class Placement:
    """Links (in-image path -> in-image target under a bind) and what could not be placed."""

    links: dict[str, str] = field(default_factory=dict)
    from_image: list[str] = field(default_factory=list)  # SONAMEs the image's copy serves
    problems: list[str] = field(default_factory=list)  # one line each, with the fix
    # what the host dirs, whole on the path, would override
    shadowed: list[str] = field(default_factory=list)


def host_ld_cache(path: Path = HOST_LD_CACHE) -> dict[str, str]:
    """SONAME -> path from the host's linker cache (first entry wins, as for ld.so); {} if
    unreadable.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_LD_CACHE + 1)
    except OSError:
        return {}
    if len(data) > MAX_LD_CACHE:
        return {}
    try:
        entries = parse_ld_cache(data)
    except LdCacheError:
        return {}
    found: dict[str, str] = {}
    for entry in entries:
        found.setdefault(entry.name, entry.path)
    return found


def image_sonames(tree: Root) -> set[str] | None:
    """The SONAMEs the image's linker cache lists; None without a readable cache (then nothing
    can be said about what the image has)."""
    try:
        data = tree.read_regular("etc/ld.so.cache", MAX_LD_CACHE)
        return None if data is None else {e.name for e in parse_ld_cache(data)}
    except (RootError, LdCacheError):
        return None


def _resolve(name: str, dirs: Iterable[Path], cache: Mapping[str, str]) -> Path | None:
    """Where the host's loader would find ``name``: the given dirs, its cache, the default dirs."""
    if "/" in name:
        return Path(name) if Path(name).is_file() else None
    for directory in [*dirs, *([Path(cache[name])] if name in cache else []), *DEFAULT_DIRS]:
        path = directory if directory.name == name else directory / name
        if path.is_file():
            return path
    return None


def components(dirs: Iterable[str | None]) -> list[Path]:
    """The shared objects of the component dirs (dlopen'ed by path, so not linked themselves)."""
    found: list[Path] = []
    for directory in filter(None, dirs):
        try:
            names = sorted(os.listdir(directory))[:MAX_COMPONENTS]
        except OSError:
            continue
        found += [
            Path(directory) / n
            for n in names
            if n.endswith(".so") and (Path(directory) / n).is_file()
        ]
    return found


def shadowed(lib_dirs: Iterable[str], image_has: set[str] | None, owned: re.Pattern) -> list[str]:
    """The libraries in the host dirs that, the dirs put on the loader's path whole, would be loaded
    instead of the image's: a SONAME the image's linker cache lists that is not the MPI's
    (``owned``). Without a cache nothing is known of the image but its loader's own C library, so
    that is looked for."""
    wanted = image_has if image_has is not None else {"libc.so.6"}
    found: set[str] = set()
    for directory in lib_dirs:
        try:
            with os.scandir(directory) as entries:
                for count, entry in enumerate(entries):
                    if count >= MAX_DIR_ENTRIES:
                        break
                    if entry.name in wanted and not owned.fullmatch(entry.name):
                        found.add(entry.name)
        except OSError:
            continue
    return sorted(found)


def place(
    needed: list[str],
    components: list[Path],
    lib_dirs: list[str],
    *,
    binds: list[tuple[str, str]],
    link_dir: str,
    owned: re.Pattern,
    image_has: set[str] | None,
    cache: Mapping[str, str] | None = None,
    dlopened: Iterable[str] = (),
) -> Placement:
    """Follow DT_NEEDED from what the ranks' programs need (``needed``: libmpi's SONAME; every
    ``owned`` library the image carries, e.g. the C++ or Fortran bindings, is replaced by the host's
    where the host has it) and from the ``components`` the MPI dlopens, through the host libraries
    the image must not serve; link each such library into ``link_dir`` at its in-image path under
    ``binds`` (host dir -> in-image dir). ``dlopened``: libraries the MPI loads by name (no
    DT_NEEDED names them), the host's where it has them. ``image_has`` None: the image's are assumed
    for all but ``owned``."""
    cache = host_ld_cache() if cache is None else cache
    search = [Path(d) for d in lib_dirs]
    bound = [(Path(src).resolve(), dst.rstrip("/")) for src, dst in binds]
    out = Placement()
    queue: list[tuple[Path, str]] = [(c, c.name) for c in components]
    seen: set[str] = set()

    def consider(name: str, label: str, optional: bool = False) -> None:
        if name in seen:
            return
        seen.add(name)
        if not owned.fullmatch(name) and (image_has is None or name in image_has):
            out.from_image.append(name)
            return
        found = _resolve(name, search, cache)
        if found is None and optional:
            out.from_image.append(name)
            return
        if found is None:
            out.problems.append(
                error_line(
                    f"{name}, needed by {label}, is neither in the image nor found on the host",
                    fix="add its directory to host_mpi.library_dirs",
                )
            )
            return
        real = found.resolve()
        inside = next(
            (f"{dst}/{real.relative_to(src)}" for src, dst in bound if real.is_relative_to(src)),
            None,
        )
        if inside is None:
            out.problems.append(
                error_line(
                    f"{name} ({real}), needed by {label}, is outside host_mpi.library_dirs",
                    fix="add its directory to host_mpi.library_dirs",
                )
            )
            return
        out.links[f"{link_dir.rstrip('/')}/{name}"] = inside
        queue.append((real, name))

    for name in needed:
        consider(name, "the ranks")
    for name in sorted(n for n in image_has or () if owned.fullmatch(n)):
        consider(name, "the image", optional=True)
    for name in dlopened:
        consider(name, "the MPI (dlopen)", optional=True)
    reads = 0
    while queue:
        path, label = queue.pop(0)
        reads += 1
        if reads > MAX_LIBRARIES:
            out.problems.append(
                error_line(
                    f"more than {MAX_LIBRARIES} files in the closure: not followed further",
                    fix="check host_mpi.library_dirs and the component dirs",
                )
            )
            break
        try:
            facts = elf_facts(path)
        except ElfError as exc:
            out.problems.append(f"{exc}; its dependencies were not followed")
            continue
        for name in facts.needed:
            consider(name, label)
    return out
