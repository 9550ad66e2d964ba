"""One 2-node virtual cluster for the run and fault tests (torn down even when they fail), on the
Intel MPI host and with the MPICH image of tests/support/mpi_fixtures.py, and the tiny showers
(session-scoped: built once)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.showers import tiny_showers
from tests.support.vcluster import fresh_name, require_namespaces


@pytest.fixture(scope="session")
def vcluster_work(tmp_path_factory) -> Path:
    """Data, images and sweeps: under a directory the cluster's site configs bind into
    containers.
    """
    return tmp_path_factory.mktemp("vcwork")


@pytest.fixture(scope="session")
def vcluster(impi_prefix, vcluster_work):
    """Two nodes with Intel MPI (impi-rt) as host MPI. The image carries MPICH but no TensorFlow, so
    the configs also bind this checkout and the venv's Python (as tests/slurm does)."""
    require_namespaces()
    from kit.vcluster import down, up

    base = Path(sys.base_prefix).resolve()
    require(
        base not in (Path("/usr"), Path("/usr/local")), "venv on the system Python: cannot bind it"
    )
    venv = Path(sys.prefix).resolve()  # a worktree's .venv may be a link to another checkout's
    binds = {f"{p}:{p}" for p in (REPO, base, venv, vcluster_work)}
    # Searchable by every user (not under pytest's own 0700 directory): an ordinary user's srun
    # reads slurm.conf and reaches munged's socket here (test_udocker_runs.py). The munge key stays
    # root's alone (0400).
    directory = Path(tempfile.mkdtemp(prefix="kit-vcluster-", dir="/tmp"))
    directory.chmod(0o755)
    try:
        report = up(directory, 2, fresh_name(), intel_mpi=impi_prefix, binds=tuple(sorted(binds)))
        yield report.state
    finally:
        down(directory)  # raises where it could not stop a daemon: the directory is kept then
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def vc_image(vcluster, mpich_oci, vcluster_work):
    """IMAGE.sqfs paired with one of the cluster's site configs (converted once per config), with the
    .current link `kit transfer push --install` would leave."""
    import shutil

    from kit.mpi import convert_paired

    require(
        shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)"
    )
    made: dict[str, Path] = {}

    def image(site_file: str) -> Path:
        if site_file not in made:
            from kit.site import load_site

            images = Path(load_site(str(Path(vcluster.directory) / site_file)).container.image_dir)
            images.mkdir(parents=True)
            done = convert_paired(
                mpich_oci, images / "gan3d.sqfs", Path(vcluster.directory) / site_file
            )
            assert not done.pair.missing, done.pair.missing
            (images / "gan3d.current").symlink_to("gan3d.sqfs")
            made[site_file] = images / "gan3d.sqfs"
        return made[site_file]

    return image


@pytest.fixture(scope="session")
def vc_openmpi_image(vcluster) -> tuple[Path, Path]:
    """(site config, image) for Debian's Open MPI as the cluster's host MPI: the small Open MPI image
    of tests/mpi (bookworm + python3-mpi4py) converted with that site's pair, as a directory image
    (no SquashFS pass: it is made once per session), with the .current link batch jobs run."""
    import shutil

    from kit.mpi import convert_paired
    from kit.site import load_site
    from tests.support.hostmpi import OPENMPI_IMAGE_PACKAGES
    from tests.support.rootfs import debian_rootfs_tar

    site = Path(vcluster.directory) / "vcluster-openmpi.yaml"
    require(
        site.is_file(),
        "no vcluster-openmpi.yaml: "
        "Debian's Open MPI missing (apt-get install openmpi-bin libopenmpi3 libpmix-dev; scripts/setup.sh)",
    )
    require(
        shutil.which("ch-run") is not None and shutil.which("mmdebstrap") is not None,
        "ch-run or mmdebstrap not installed (scripts/setup.sh installs them)",
    )
    images = Path(load_site(str(site)).container.image_dir)
    images.mkdir(parents=True)
    done = convert_paired(debian_rootfs_tar(OPENMPI_IMAGE_PACKAGES), images / "ompi", site)
    assert not done.pair.missing, done.pair.missing
    (images / "ompi.current").symlink_to(
        "ompi"
    )  # where the pair's launch line runs it (kit transfer's link)
    return site, images / "ompi"


@pytest.fixture(scope="session")
def showers(tmp_path_factory) -> list[Path]:
    return tiny_showers(tmp_path_factory.mktemp("showers"))


@pytest.fixture(scope="session")
def vc_data(showers, vcluster_work) -> list[Path]:
    """The showers where the containers see them (a directory the site configs bind)."""
    import shutil

    data = vcluster_work / "data"
    data.mkdir()
    return [Path(shutil.copy(f, data / f.name)) for f in showers]


@pytest.fixture
def on_vcluster(vcluster, monkeypatch):
    """kit scale talks to the virtual cluster, not the one-node test Slurm other tests may have
    started.
    """
    monkeypatch.setenv("SLURM_CONF", str(vcluster.conf))
    return vcluster


@pytest.fixture
def cluster_dir():
    """A cluster directory that is cleaned up whatever the test did to it: short, as Slurm's
    sockets under it must be (a test's own tmp_path is too long)."""
    require_namespaces()
    from kit.vcluster import down

    parent = Path(tempfile.mkdtemp(prefix="kit-vc-", dir="/tmp"))
    directory = parent / "vc"
    yield directory
    down(directory)
    shutil.rmtree(parent, ignore_errors=True)
