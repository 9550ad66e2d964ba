"""What each MPI family's runtime is on the host, and the one rule that decides which host libraries
go on the ranks' loader path.

Why: a host library dir put on LD_LIBRARY_PATH whole serves the ranks everything it holds. A dir
that holds only the MPI (Intel MPI's ``lib``, ``/opt/openmpi/4.1.5/lib``) loses nothing by it; a
shared system dir (Debian's ``/usr/lib/x86_64-linux-gnu``, where Debian's MPICH and Open MPI live)
also holds the host's libc, libm, libstdc++, which then override the image's. So, for every family:
when a host dir holds a library the image's linker cache also lists and that is not the MPI's
runtime, only links to the libraries the host must provide go on the path (kit.mpi.hostlibs:
the runtime's own, and what the image lacks, from the ELF closure); otherwise the dirs go whole.
A family is a row of ``RUNTIMES``, not a branch.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kit.errors import error_line
from kit.mpi.hostlibs import Placement, components, image_sonames, place, shadowed
from kit.mpi.launch import under
from kit.rootfs import Root
from kit.site.model import HostMPI


@dataclass(frozen=True)
class Runtime:
    """One MPI family's runtime on the host."""

    name: str  # as messages name it
    # always the host's, even where the image has the SONAME: one version with the launcher
    libs: re.Pattern
    # loaded by name, so in no DT_NEEDED (taken from the host where it has them)
    dlopened: tuple[str, ...]
    component_dirs: Callable[[HostMPI], Sequence[str | None]]  # shared objects dlopen'ed by path


def _fabric_providers(mpi: HostMPI) -> list[str]:
    """libfabric's provider dir(s), as the site names them to the ranks (FI_PROVIDER_PATH)."""
    return mpi.env.get("FI_PROVIDER_PATH", "").split(":")


# Open MPI: its own libraries and what must be one version with its daemons and components (PMIx,
# libevent, hwloc, UCX, libfabric). Components: MCA's and an external PMIx's.
OPENMPI = Runtime(
    "Open MPI",
    re.compile(
        r"lib(?:mpi(?:_[\w-]+)?|open-(?:pal|rte)|mca_common_\w+|oshmem|ompitrace|pmix"
        r"|event(?:_\w+)?-[\d.]+|hwloc|uc[mpst]|fabric)\.so\.[\d.]+",
        re.ASCII,
    ),
    (),
    lambda mpi: [mpi.ompi.components, mpi.ompi.pmix_components],
)
# The MPICH ABI (MPICH, Debian's libmpich, Intel MPI, MVAPICH2, Cray MPICH): libmpi/libmpich and its
# bindings (cxx, fort, ilp64, abi, java), MPICH's own helpers (mpl, opa), the process managers'
# interfaces (PMI, PMI-2, PMIx) and the transports (libfabric, UCX, hwloc, xpmem). Intel MPI dlopens
# libfabric by name; its providers are dlopen'ed by path.
MPICH = Runtime(
    "MPICH-ABI MPI",
    re.compile(
        r"lib(?:mpi(?:ch)?(?:cxx|fort|java|_[\w-]+)?|mpi(?:ch)?fort_\w+|mpl|opa|pmi2?|pmix"
        r"|fabric|hwloc|uc[mpst]|xpmem)\.so\.[\d.]+",
        re.ASCII,
    ),
    ("libfabric.so.1",),
    _fabric_providers,
)
RUNTIMES = {"openmpi": OPENMPI, "mpich": MPICH}


def runtime_links(
    mpi: HostMPI,
    family: str,
    soname: str,
    *,
    lib_binds: list[tuple[str, str]],
    link_dir: str,
    root: Path,
) -> Placement | None:
    """The links in ``link_dir`` that alone go on the loader's path, or None where the host's
    library dirs hold nothing the image has beyond the MPI (they then go on the path whole). Where
    the host's MPI is not on this machine nothing can be judged: None, and why, in a Placement's
    problems."""
    runtime = RUNTIMES[family]
    # e.g. converting outside the perimeter
    if not any((Path(d) / soname).exists() for d in mpi.lib_dirs):
        return Placement(
            problems=[
                error_line(
                    f"the host's {soname} is not in host_mpi.library_dirs on this machine, "
                    "so the libraries it needs are unknown: "
                    "its library dirs go on the loader's path whole (with whatever else they hold, "
                    "e.g. a libc)",
                    fix=f"make the pair where the site's {runtime.name} is installed (kit mpi pair "
                    "--prepare, or kit image convert --site on the login node)",
                )
            ]
        )
    with Root(root) as tree:
        image_has = image_sonames(tree)
    overridden = shadowed(mpi.lib_dirs, image_has, runtime.libs)
    if not overridden:
        return None
    found = components(runtime.component_dirs(mpi))
    placed = place(
        [soname],
        found,
        mpi.lib_dirs,
        binds=lib_binds,
        link_dir=link_dir,
        owned=runtime.libs,
        image_has=image_has,
        dlopened=runtime.dlopened,
    )
    placed.shadowed = overridden
    return placed


UCS = "libucs.so.0"


def ucx_module_env(links: dict[str, str], binds: list[tuple[str, str]]) -> dict[str, str]:
    """UCX_MODULE_DIR naming the host UCX's transport modules (libuct_*.so) as bound, where the pair
    links the host's libucs. Why: UCX looks for them in DIR/ucx beside the libucs it was loaded
    through (the pair's link dir: nothing there), then in its compiled-in dir, which inside the
    image is the image's own UCX's (Debian's /usr/lib/x86_64-linux-gnu/ucx): modules of another
    build."""
    for link, target in links.items():
        if posixpath.basename(link) != UCS:
            continue
        module_dir = f"{posixpath.dirname(target)}/ucx"
        host = next(
            (
                src.rstrip("/") + module_dir[len(dst.rstrip("/")) :]
                for src, dst in binds
                if under(module_dir, dst)
            ),
            None,
        )
        if host is not None and Path(host).is_dir():
            return {"UCX_MODULE_DIR": module_dir}
    return {}
