"""Judge what one rank of `kit mpi check` mapped (/proc/self/maps, kit.mpi.rank_report) against
what the pair promises: the host MPI's dependencies, Open MPI's components and UCX's transport
modules all the host's where the pair binds them, and one copy of each library.

Why: a rank can run the host's libmpi and still load a dependency from the image (an
LD_PRELOAD, an image binary's RPATH, a dlopen by full path) or a module from a directory the
MPI finds by itself (UCX's compiled-in module dir, an MCA component path): an allreduce on one
node may still work, and a job across the fabric then fails or corrupts memory. Each problem is
one line naming the library, where it was mapped from, where it should have come from and the fix.
"""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from kit.errors import error_line
from kit.mpi.launch import translate, under
from kit.mpi.runtimes import UCS

if TYPE_CHECKING:  # a cycle at run time: kit.mpi.check imports this module
    from kit.mpi.check import RankReport
    from kit.mpi.pair_builder import Pair

# The MPI's dependencies that must be one copy, the host's where the pair binds it: the transports
# (libfabric, UCX, PSM2, verbs, xpmem), the process managers' interfaces, hwloc, Open MPI's runtime.
DEPENDENCY = re.compile(
    r"lib(?:fabric|uc[mpst]|pmi2?|pmix|hwloc|psm2|psm_infinipath|ibverbs|rdmacm|xpmem"
    r"|open-(?:pal|rte)|event(?:_\w+)?-[\d.]+)\.so\.\d+",
    re.ASCII,
)
# UCX's transports, dlopen'ed from its module dir
UCT_MODULE = re.compile(r"libuct_\w+\.so(?:\.[\d.]+)?", re.ASCII)
SONAME = re.compile(r"(.+?\.so(?:\.\d+)?)(?:\.[\d.]+)?")  # libfabric.so.1.20.0 -> libfabric.so.1
FIX_IMAGE_FIRST = (
    "let nothing in the image load it ahead of the pair's LD_LIBRARY_PATH (an LD_PRELOAD, "
    "an image binary's RPATH, a dlopen by full path), or remove the image's copy"
)


def soname_of(path: str) -> str:
    """The SONAME a mapped file's name stands for (its name up to the major version)."""
    name = path.rsplit("/", 1)[-1]
    match = SONAME.fullmatch(name)
    return match.group(1) if match else name


def host_copy(pair: Pair, soname: str) -> str | None:
    """Where in the image the pair puts the host's ``soname`` on the loader's path: its link, or a
    bound host library dir on LD_LIBRARY_PATH that holds it; None if the pair does not provide
    it."""
    path_dirs = [d.rstrip("/") for d in pair.env_prepend.get("LD_LIBRARY_PATH", [])]
    for link, target in pair.links.items():
        if posixpath.basename(link) == soname and posixpath.dirname(link) in path_dirs:
            return target
    for src, dst in pair.binds:
        if dst.rstrip("/") in path_dirs and (Path(src) / soname).exists():
            return f"{dst.rstrip('/')}/{soname}"
    return None


def _bound(pair: Pair, path: str) -> bool:
    return any(under(path, dst) for _src, dst in pair.binds)


def judge_libraries(pair: Pair, rank: RankReport) -> list[str]:
    """Two copies of one SONAME; a dependency the pair binds from the host but mapped from the
    image; a UCX transport module from anywhere but the bound host UCX's module dir."""
    problems = []
    by_soname: dict[str, set[str]] = defaultdict(set)
    for lib in rank.libs:
        by_soname[soname_of(lib)].add(lib)
    for soname, paths in sorted(by_soname.items()):
        if len(paths) > 1:
            want = host_copy(pair, soname)
            problems.append(
                error_line(
                    f"rank {rank.rank}: {soname} is mapped twice ({', '.join(sorted(paths))}); "
                    f"it should come once, from {want or 'one place'}",
                    fix=FIX_IMAGE_FIRST,
                )
            )
            continue
        path = next(iter(paths))
        if (
            DEPENDENCY.fullmatch(soname)
            and not _bound(pair, path)
            and (want := host_copy(pair, soname))
        ):
            problems.append(
                error_line(
                    f"rank {rank.rank}: {soname} mapped from {path} (the image's), "
                    f"but the pair binds the host's ({want})",
                    fix=FIX_IMAGE_FIRST,
                )
            )
    ucs = host_copy(pair, UCS)
    if ucs is not None:
        module_dir = f"{posixpath.dirname(ucs)}/ucx"
        for lib in rank.libs:
            name = lib.rsplit("/", 1)[-1]
            if UCT_MODULE.fullmatch(name) and posixpath.dirname(lib) != module_dir:
                problems.append(
                    error_line(
                        f"rank {rank.rank}: "
                        f"UCX transport module {name} mapped from {posixpath.dirname(lib)}, "
                        f"not from the host UCX's module dir {module_dir}",
                        fix="re-make the pair where the site's MPI is installed (it sets "
                        f"UCX_MODULE_DIR={module_dir})",
                    )
                )
    return problems


def component_dirs(pair: Pair) -> set[str]:
    """The in-image dirs Open MPI's and PMIx's components may come from: the host's component dirs
    as the pair binds them, and as they appear under a bound host library dir."""
    ompi = pair.site.host_mpi.ompi
    allowed: set[str] = set()
    for host_dir in (ompi.components, ompi.pmix_components):
        if host_dir:
            allowed |= {
                dst.rstrip("/")
                for src, dst in pair.binds
                if src.rstrip("/") == host_dir.rstrip("/")
            }
            allowed.add(translate(host_dir.rstrip("/"), pair.binds))
    return allowed


def judge_components(pair: Pair, rank: RankReport) -> list[str]:
    """Open MPI components (mca_*.so) mapped from a dir that is neither the host's nor the
    pair's.
    """
    allowed = component_dirs(pair)
    problems = []
    for directory in rank.component_dirs:
        if directory not in allowed:
            names = sorted(
                {m.rsplit("/", 1)[-1] for m in rank.mapped if m.rsplit("/", 1)[0] == directory}
            )
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            problems.append(
                error_line(
                    f"rank {rank.rank}: Open MPI components ({shown}) mapped from {directory}, "
                    f"not from the host's component dirs ({', '.join(sorted(allowed)) or 'none bound'})",
                    fix="drop what points Open MPI elsewhere (OMPI_MCA_mca_base_component_path, "
                    "~/.openmpi/components) and bind host_mpi.openmpi.components (kit mpi pair)",
                )
            )
    return problems
