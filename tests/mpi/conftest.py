"""Real parts of the MPI pair tests beyond the shared ones (tests/support/mpi_fixtures.py): sites
for this machine's Intel MPI, Open MPI and MPICH, and images built with mmdebstrap + buildah and
converted by kit.image (all cached between runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.hostmpi import (
    HOST_OMPI_LIBS,
    OPENMPI_IMAGE_PACKAGES,
    OPENMPI_PACKAGES,
    SYSTEM,
    TARGET,
    impi_site_dict,
    openmpi_site_dict,
    require_tools,
)
from tests.support.parts import require
from tests.support.rootfs import _locked, debian_rootfs_dir, debian_rootfs_tar


@pytest.fixture(scope="session")
def impi_site(impi_prefix, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("site") / "impi-host.yaml"
    path.write_text(yaml.safe_dump(impi_site_dict(impi_prefix), sort_keys=False))
    return path


@pytest.fixture(scope="session")
def mpich_squash(mpich_image) -> Path:
    require_tools("mksquashfs")
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
    require_tools("mmdebstrap")
    return debian_rootfs_tar(OPENMPI_PACKAGES)


@pytest.fixture(scope="session")
def openmpi_dir(openmpi_tar) -> Path:
    return debian_rootfs_dir(OPENMPI_PACKAGES)


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
    require_tools("mmdebstrap")
    from kit.mpi import convert_paired

    out = tmp_path_factory.mktemp("ompi") / "ompi"
    done = convert_paired(debian_rootfs_tar(OPENMPI_IMAGE_PACKAGES), out, openmpi_site, fmt="dir")
    assert not done.pair.missing, done.pair.missing
    return out


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
