"""What Open MPI needs beyond its libraries when the host's replaces the image's, and how its own
mpirun starts hybrid MPI/OpenMP ranks.

Open MPI dlopens its MCA components and reads its help files from paths compiled into the host
build; inside the image those paths hold the image's own Open MPI (or nothing). Binding the
host's dirs and naming them with OPAL_PKGLIBDIR / OPAL_PKGDATADIR (and PMIX_PKGLIBDIR for an
external PMIx) makes every part of the job the host's: Open MPI supports a job only when one
version runs everywhere in it (docs/mpi-abi.md).
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from kit.site import Site
from kit.site.model import HostMPI, OpenMPI

if TYPE_CHECKING:
    from kit.mpi.hostlibs import Placement

# The batch script's own variables every rank needs (rsh-started daemons do not pass them on).
JOB_EXPORTS = ("OMP_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL", "KIT_RUN_ID")
# in-image dir (under mpi_target) -> (OpenMPI field, the variable that tells Open MPI / PMIx)
DIRS = (("ompi-components", "components", "OPAL_PKGLIBDIR"),
        ("ompi-help", "help_files", "OPAL_PKGDATADIR"),
        ("pmix-components", "pmix_components", "PMIX_PKGLIBDIR"))
# The Open MPI runtime: its own libraries and those that must be one version with the host's daemons
# and components (PMIx, libevent, hwloc, UCX, libfabric). Always the host's, even where the
# image has the same SONAME; which of them a host needs comes from the ELF closure (kit.mpi.hostlibs).
RUNTIME_LIBS = re.compile(r"lib(?:mpi(?:_[\w-]+)?|open-(?:pal|rte)|mca_common_\w+|oshmem|ompitrace|pmix"
                          r"|event(?:_\w+)?-[\d.]+|hwloc|uc[mpst]|fabric)\.so\.[\d.]+", re.ASCII)


def openmpi_binds(ompi: OpenMPI, target: str) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The binds of the host's component and help dirs, and the variables naming them inside."""
    binds, env = [], {}
    for name, attr, variable in DIRS:
        host_dir = getattr(ompi, attr)
        if host_dir:
            binds.append((host_dir, f"{target}/{name}"))
            env[variable] = f"{target}/{name}"
    return binds, env


def runtime_links(mpi: HostMPI, soname: str, lib_binds: list[tuple[str, str]], link_dir: str,
                  root: Path) -> Placement:
    """Links in ``link_dir`` to the host libraries libmpi and the MCA (and PMIx) components need
    that the image must not serve: the runtime's own, and what the image lacks (kit.mpi.hostlibs).
    None, and why, where the host's Open MPI is not on this machine."""
    # imported here: the readers (ELF, linker cache) are the pair builder's, and kit.mpi.launch,
    # which renders batch scripts on a login node, imports this module for mpirun's words
    from kit.mpi.hostlibs import Placement, components, image_sonames, place
    from kit.rootfs import Root

    if not any((Path(d) / soname).exists() for d in mpi.lib_dirs):  # e.g. converting outside the perimeter
        return Placement(problems=[
            f"the host's {soname} is not in host_mpi.library_dirs on this machine, so the libraries it needs "
            "are unknown: its library dirs go on the loader's path whole (with whatever else they hold, e.g. "
            "a libc); fix: make the pair where the site's Open MPI is installed (kit mpi pair --prepare, or "
            "kit image convert --site on the login node)"])
    with Root(root) as tree:
        image_has = image_sonames(tree)
    found = components([mpi.ompi.components, mpi.ompi.pmix_components])
    return place([soname], found, mpi.lib_dirs, lib_binds, link_dir, RUNTIME_LIBS, image_has)


def is_openmpi_mpirun(site: Site) -> bool:
    """An Open MPI host started by its own mpirun/mpiexec (not srun)."""
    return site.host_mpi.vendor == "openmpi" and shlex.split(site.host_mpi.launcher)[0] != "srun"


def root_words(site: Site) -> list[str]:
    """mpirun refuses root unless told; only a site that says so gets the flag."""
    return ["--allow-run-as-root"] if site.host_mpi.ompi.allow_run_as_root else []


def mpirun_job_words(site: Site, hwthreads: bool, exports: Sequence[str]) -> list[str]:
    """After `mpirun -n ${NRANKS}`: ${RANKS_PER_NODE} ranks per node, each bound to
    ${OMP_NUM_THREADS} cores (hardware threads when the run uses them), the job's variables
    exported by name. Values stay in the batch script's shell variables."""
    pe = "ppr:${RANKS_PER_NODE}:node:PE=${OMP_NUM_THREADS}"
    bind = ["--use-hwthread-cpus", "--bind-to", "hwthread"] if hwthreads else ["--bind-to", "core"]
    names = [n for n in dict.fromkeys(exports) if not n.startswith("OMPI_")]  # mpirun passes OMPI_* itself
    return ["--map-by", pe, *bind, *root_words(site), *[w for n in names for w in ("-x", n)]]
