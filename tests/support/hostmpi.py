"""The host MPIs the tests pair images with: Intel MPI's runtime (impi-rt), Debian's Open MPI and
MPICH, as site dicts, with the paths and package lists the images are built from."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.parts import require

IMPI_VERSION = "2021.18.1"  # bundles libfabric; 2021.19 needs a libfabric wheel PyPI lacks here
MPICH_PACKAGES = ["python3", "mpich"]
OPENMPI_PACKAGES = ["libopenmpi3"]  # Debian's Open MPI runtime, nothing else
TARGET = "/opt/hostmpi"


def require_tools(*names: str) -> None:
    for name in names:
        require(
            shutil.which(name) is not None, f"{name} not installed (scripts/setup.sh installs it)"
        )


def impi_site_dict(prefix: Path) -> dict:
    lib = str(prefix / "lib")
    return {
        "name": "impi-host",
        "description": "this machine, with the Intel MPI runtime (impi-rt) playing the site's host MPI",
        "scheduler": {"type": "local", "max_nodes": 1, "max_walltime": "00:10:00"},
        "node": {
            "cpu_model": "test",
            "sockets": 1,
            "cores_per_socket": 2,
            "threads_per_core": 1,
            "numa_domains": 1,
            "memory_gb": 24,
            "usable_memory_gb": 20,
            "clock_ghz_avx": 2.0,
            "fp32_flop_per_cycle_per_core": 64,
        },
        "host_mpi": {
            "vendor": "intel",
            "version": IMPI_VERSION,
            "prefix": str(prefix),
            "library_dirs": [lib],
            "launcher": "mpiexec",
            # one node: shared memory; libfabric's providers live beside libmpi in the wheel
            "env": {"I_MPI_FABRICS": "shm", "FI_PROVIDER": "tcp", "FI_PROVIDER_PATH": lib},
        },
        "container": {"runtime": "charliecloud", "image_dir": "/tmp", "mpi_target": TARGET},
        "transfer": {"host": "localhost", "image_dir": "/tmp"},
        "network": {"latency_us": 1.0, "bandwidth_gbps": 10.0},
    }


OPENMPI_IMAGE_PACKAGES = ["python3", "python3-mpi4py"]  # Debian's mpi4py pulls in Open MPI 4.1.4
HOST_OMPI_LIBS = Path("/usr/lib/x86_64-linux-gnu")


def openmpi_site_dict(launcher: str = "/usr/bin/mpirun.openmpi") -> dict:
    """This machine's Debian Open MPI as the site's host MPI (all of it bound into the image:
    libraries, MCA components, help files and its external PMIx's components)."""
    site = impi_site_dict(Path("/usr"))
    site["name"] = "ompi-host"
    site["description"] = "this machine, with Debian's Open MPI 4.1.4 playing the site's host MPI"
    site["host_mpi"] = {
        "vendor": "openmpi",
        "version": "4.1.4",
        "prefix": "/usr",
        "library_dirs": [str(HOST_OMPI_LIBS)],
        "launcher": launcher,
        "soname": "libmpi.so.40",
        "openmpi": {
            "components": str(HOST_OMPI_LIBS / "openmpi/lib/openmpi3"),
            "help_files": "/usr/share/openmpi",
            "pmix_components": str(HOST_OMPI_LIBS / "pmix2/lib/pmix"),
            "mca": {"btl": "self,vader,tcp", "pml": "ob1"},
            "allow_run_as_root": True,
        },
    }  # the tests run as root
    return site


SYSTEM = Path("/usr/lib/x86_64-linux-gnu")
