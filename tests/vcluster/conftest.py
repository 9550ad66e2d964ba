"""One 2-node virtual cluster for the run and fault tests (torn down even when they fail), the Intel
MPI host and MPICH image of tests/mpi, and the showers of tests/slurm (session-scoped: built once)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.mpi.conftest import impi_prefix, mpich_oci  # noqa: F401  (fixtures)
from tests.slurm.conftest import REPO, showers  # noqa: F401  (fixtures)
from tests.support.vcluster import fresh_name, require_namespaces


@pytest.fixture(scope="session")
def vcluster_work(tmp_path_factory) -> Path:
    """Data, images and sweeps: under a directory the cluster's site configs bind into containers."""
    return tmp_path_factory.mktemp("vcwork")


@pytest.fixture(scope="session")
def vcluster(tmp_path_factory, impi_prefix, vcluster_work):  # noqa: F811
    """Two nodes with Intel MPI (impi-rt) as host MPI. The image carries MPICH but no TensorFlow, so
    the configs also bind this checkout and the venv's Python (as tests/slurm does)."""
    require_namespaces()
    from kit.vcluster import down, up

    base = Path(sys.base_prefix).resolve()
    if base in (Path("/usr"), Path("/usr/local")):
        pytest.skip("venv on the system Python: cannot bind it into the container")
    directory = tmp_path_factory.mktemp("vcluster")
    try:
        report = up(directory, 2, fresh_name(), intel_mpi=impi_prefix,
                    binds=(f"{REPO}:{REPO}", f"{base}:{base}", f"{vcluster_work}:{vcluster_work}"))
        yield report.state
    finally:
        down(directory)
