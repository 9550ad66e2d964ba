"""Session fixtures shared by the MPI, Slurm, scale, study and virtual-cluster tests: the Intel MPI
runtime as the site's host MPI and the MPICH test images (built once, cached between runs).
Registered for the whole suite by pytest_plugins in tests/conftest.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.hostmpi import (
    IMPI_VERSION,
    MPICH_PACKAGES,
    TARGET,
    impi_site_dict,
    require_tools,
)
from tests.support.parts import require
from tests.support.rootfs import CACHE, _locked


@pytest.fixture(scope="session")
def impi_prefix() -> Path:
    """Intel MPI runtime installed from PyPI into a cached prefix: the site's "host MPI"."""
    prefix = CACHE / "impi" / IMPI_VERSION
    with _locked(prefix):
        if not (prefix / "bin" / "mpiexec.hydra").is_file():
            part = prefix.with_name(prefix.name + ".part")
            shutil.rmtree(part, ignore_errors=True)
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    "--prefix",
                    str(part),
                    f"impi-rt=={IMPI_VERSION}",
                ],
                capture_output=True,
                text=True,
            )
            require(run.returncode == 0, f"cannot install impi-rt from PyPI: {run.stderr[-500:]}")
            shutil.rmtree(prefix, ignore_errors=True)
            os.replace(part, prefix)
    require(
        (prefix / "lib" / "libmpi.so.12").is_file(), f"impi-rt in {prefix} has no lib/libmpi.so.12"
    )
    return prefix


@pytest.fixture(scope="session")
def impi_srun_site(impi_prefix, slurm, tmp_path_factory) -> Path:
    """The same host MPI started the way Slurm sites start Intel MPI: srun --mpi=pmi2, with Slurm's
    PMI-2 library bound into the container (a host library dir of its own) and named by
    I_MPI_PMI_LIBRARY; the pair rewrites that host path to its in-container bind."""
    pmi = tmp_path_factory.mktemp("host-pmi")
    system = Path("/usr/lib/x86_64-linux-gnu/libpmi2.so.0")
    require(system.exists(), "Slurm's PMI-2 library missing (apt-get install libpmi2-0)")
    shutil.copy(system, pmi / "libpmi2.so.0")  # a real copy: a symlink would dangle inside ch-run
    site = impi_site_dict(impi_prefix)
    site["name"] = "impi-slurm"
    site["scheduler"] = {
        "type": "slurm",
        "partition": "debug",
        "max_nodes": 1,
        "max_walltime": "00:10:00",
        "mpi_plugin": "pmi2",
    }
    site["host_mpi"]["launcher"] = "srun"
    site["host_mpi"]["library_dirs"].append(str(pmi))
    site["host_mpi"]["env"]["I_MPI_PMI_LIBRARY"] = str(pmi / "libpmi2.so.0")
    path = tmp_path_factory.mktemp("site") / "impi-slurm.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def mpich_oci() -> Path:
    """oci-archive built by buildah: bookworm + Debian MPICH + mpi4py (built on MPICH) + the
    recipe's alias link that lets the image's libmpich.so.12 resolve to the host's libmpi.so.12."""
    require_tools("mmdebstrap", "buildah")
    from tests.support.images import mpi4py_from_venv, oci_image

    require(
        (mpi4py_from_venv() / "MPI.cpython-311-x86_64-linux-gnu.so").is_file(),
        "venv mpi4py missing",
    )
    return oci_image(
        MPICH_PACKAGES,
        files={"/usr/local/lib/python3.11/dist-packages/mpi4py": mpi4py_from_venv()},
        links={f"{TARGET}/compat/libmpich.so.12": "../lib0/libmpi.so.12"},
        tag="mpich",
    )


@pytest.fixture(scope="session")
def mpich_system_oci() -> Path:
    """The same image without the recipe's alias: for a host whose MPICH is Debian's libmpich.so.12 in
    its system dir (site-configs/laptop.yaml), where the pair links libmpich.so.12 to the host's
    libmpich itself (only the MPI's libraries on the loader's path, docs/mpi-abi.md)."""
    require_tools("mmdebstrap", "buildah")
    from tests.support.images import mpi4py_from_venv, oci_image

    require(
        (mpi4py_from_venv() / "MPI.cpython-311-x86_64-linux-gnu.so").is_file(),
        "venv mpi4py missing",
    )
    return oci_image(
        MPICH_PACKAGES,
        files={"/usr/local/lib/python3.11/dist-packages/mpi4py": mpi4py_from_venv()},
        tag="mpich-system",
    )


@pytest.fixture(scope="session")
def mpich_image(mpich_oci) -> Path:
    """The Charliecloud directory image made by `kit.image.convert` with the pair's mount point."""
    from tests.support.images import converted_dir

    return converted_dir(mpich_oci, [f"{TARGET}/lib0"])
