"""What Open MPI needs beyond its libraries when the host's replaces the image's, and how its own
mpirun starts hybrid MPI/OpenMP ranks.

Open MPI dlopens its MCA components and reads its help files from paths compiled into the host
build; inside the image those paths hold the image's own Open MPI (or nothing). Binding the
host's dirs and naming them with OPAL_PKGLIBDIR / OPAL_PKGDATADIR (and PMIX_PKGLIBDIR for an
external PMIx) makes every part of the job the host's: Open MPI supports a job only when one
version runs everywhere in it (docs/mpi-abi.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.site import Site
from kit.site.model import OpenMPI, is_openmpi_mpirun  # noqa: F401 (kit.mpi.launch's too)

# The batch script's own variables every rank needs (rsh-started daemons do not pass them on).
JOB_EXPORTS = ("OMP_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL", "KIT_RUN_ID")
# in-image dir (under mpi_target) -> (OpenMPI field, the variable that tells Open MPI / PMIx)
DIRS = (
    ("ompi-components", "components", "OPAL_PKGLIBDIR"),
    ("ompi-help", "help_files", "OPAL_PKGDATADIR"),
    ("pmix-components", "pmix_components", "PMIX_PKGLIBDIR"),
)


def openmpi_binds(ompi: OpenMPI, target: str) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The binds of the host's component and help dirs, and the variables naming them inside."""
    binds, env = [], {}
    for name, attr, variable in DIRS:
        host_dir = getattr(ompi, attr)
        if host_dir:
            binds.append((host_dir, f"{target}/{name}"))
            env[variable] = f"{target}/{name}"
    return binds, env


def root_words(site: Site) -> list[str]:
    """mpirun refuses root unless told; only a site that says so gets the flag."""
    return ["--allow-run-as-root"] if site.host_mpi.ompi.allow_run_as_root else []


def mpirun_job_words(site: Site, hwthreads: bool, exports: Sequence[str]) -> list[str]:
    """After `mpirun -n ${NRANKS}`: ${RANKS_PER_NODE} ranks per node, each bound to
    ${OMP_NUM_THREADS} cores (hardware threads when the run uses them), the job's variables
    exported by name. Values stay in the batch script's shell variables."""
    pe = "ppr:${RANKS_PER_NODE}:node:PE=${OMP_NUM_THREADS}"
    bind = ["--use-hwthread-cpus", "--bind-to", "hwthread"] if hwthreads else ["--bind-to", "core"]
    # mpirun passes OMPI_* itself
    names = [n for n in dict.fromkeys(exports) if not n.startswith("OMPI_")]
    return ["--map-by", pe, *bind, *root_words(site), *[w for n in names for w in ("-x", n)]]
