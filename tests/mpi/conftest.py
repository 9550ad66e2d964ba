"""Real parts for the MPI pair tests: Intel MPI runtime (impi-rt wheel) as the "host" MPI and
images built with mmdebstrap + buildah and converted by kit.image (all cached between runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import require
from tests.support.rootfs import CACHE, _locked, debian_rootfs_dir, debian_rootfs_tar

IMPI_VERSION = "2021.18.1"  # bundles libfabric; 2021.19 needs a libfabric wheel PyPI lacks here
MPICH_PACKAGES = ["python3", "mpich"]
OPENMPI_PACKAGES = ["libopenmpi3"]  # Debian's Open MPI runtime, nothing else
TARGET = "/opt/hostmpi"


def _tools(*names: str) -> None:
    for name in names:
        require(
            shutil.which(name) is not None, f"{name} not installed (scripts/setup.sh installs it)"
        )


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
def impi_site(impi_prefix, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("site") / "impi-host.yaml"
    path.write_text(yaml.safe_dump(impi_site_dict(impi_prefix), sort_keys=False))
    return path


@pytest.fixture(scope="session")
def mpich_oci() -> Path:
    """oci-archive built by buildah: bookworm + Debian MPICH + mpi4py (built on MPICH) + the
    recipe's alias link that lets the image's libmpich.so.12 resolve to the host's libmpi.so.12."""
    _tools("mmdebstrap", "buildah")
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
    _tools("mmdebstrap", "buildah")
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


@pytest.fixture(scope="session")
def mpich_squash(mpich_image) -> Path:
    _tools("mksquashfs")
    out = mpich_image.with_name(mpich_image.name + ".sqfs")
    with _locked(out):
        if not out.exists():
            part = out.with_name(out.name + ".part")
            subprocess.run(
                [
                    "mksquashfs",
                    str(mpich_image),
                    str(part),
                    "-noappend",
                    "-no-xattrs",
                    "-comp",
                    "lz4",
                    "-quiet",
                    "-no-progress",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            os.replace(part, out)
    return out


@pytest.fixture(scope="session")
def openmpi_tar() -> Path:
    """A real bookworm tree with only Open MPI (libopenmpi3), as a tarball."""
    _tools("mmdebstrap")
    return debian_rootfs_tar(OPENMPI_PACKAGES)


@pytest.fixture(scope="session")
def openmpi_dir(openmpi_tar) -> Path:
    return debian_rootfs_dir(OPENMPI_PACKAGES)


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


@pytest.fixture(scope="session")
def openmpi_site(tmp_path_factory) -> Path:
    require(
        Path("/usr/bin/mpirun.openmpi").is_file() and (HOST_OMPI_LIBS / "libmpi.so.40").exists(),
        "Debian's Open MPI missing (apt-get install openmpi-bin libopenmpi3; scripts/setup.sh)",
    )
    path = tmp_path_factory.mktemp("site") / "ompi-host.yaml"
    path.write_text(yaml.safe_dump(openmpi_site_dict(), sort_keys=False))
    return path


@pytest.fixture(scope="session")
def openmpi_image(openmpi_site, tmp_path_factory) -> Path:
    """bookworm + python3-mpi4py (Debian's, built on its Open MPI 4.1.4), converted for the Open MPI
    site in one pass (kit.mpi.convert_paired): the pair's mount points and the links to the host's
    Open MPI runtime libraries are made inside. A small image that proves the binding with an allreduce."""
    _tools("mmdebstrap")
    from kit.mpi import convert_paired

    out = tmp_path_factory.mktemp("ompi") / "ompi"
    done = convert_paired(debian_rootfs_tar(OPENMPI_IMAGE_PACKAGES), out, openmpi_site, fmt="dir")
    assert not done.pair.missing, done.pair.missing
    return out


SYSTEM = Path("/usr/lib/x86_64-linux-gnu")


@pytest.fixture(scope="session")
def mpich_host_site(tmp_path_factory) -> Path:
    require(
        (SYSTEM / "libmpich.so.12").exists() and Path("/usr/bin/mpiexec.hydra").is_file(),
        "Debian's MPICH missing (apt-get install mpich libmpich-dev; scripts/setup.sh)",
    )
    require(
        shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)"
    )
    site = impi_site_dict(Path("/usr"))
    site["name"] = "mpich-system"
    site["description"] = (
        "this machine, with Debian's MPICH (in /usr/lib/x86_64-linux-gnu) as the host MPI"
    )
    site["host_mpi"] = {
        "vendor": "mpich",
        "version": "4.0.2",
        "prefix": "/usr",
        "library_dirs": [str(SYSTEM)],
        "launcher": "mpiexec",
        "soname": "libmpich.so.12",
        "env": {},
    }
    path = tmp_path_factory.mktemp("site") / "mpich-system.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def mpich_paired(mpich_host_site, mpich_oci, tmp_path_factory) -> Path:
    """The MPICH image without the recipe's alias for an Intel MPI host (libmpich -> the host's
    libmpi: this host names it libmpich), with the pair's mount points and links made inside."""
    from kit.image.convert import convert
    from kit.mpi import make_pair, prepare_image_dir

    out = tmp_path_factory.mktemp("mpich-system") / "img"
    convert(mpich_oci, out, fmt="dir")
    (out / TARGET.lstrip("/") / "compat/libmpich.so.12").unlink()
    prepare_image_dir(make_pair(mpich_host_site, out), out)  # what conversion with --site does
    assert not make_pair(mpich_host_site, out).missing
    return out
