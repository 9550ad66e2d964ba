"""Fixtures of the training tests: the parts a Horovod run under MPICH needs, and its showers
(module-scoped: each file simulates its own)."""

import pytest

from tests.support.parts import require
from tests.support.training import MPIEXEC, horovod_with_mpi


@pytest.fixture(scope="module")
def parts():
    require(MPIEXEC is not None, "MPICH mpiexec (apt-get install mpich)")
    require(horovod_with_mpi(), "horovod built with MPI (scripts/setup.sh)")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from gan3d.simulate import write_files

    return write_files(tmp_path_factory.mktemp("showers"), 3, 64, seed=5)
