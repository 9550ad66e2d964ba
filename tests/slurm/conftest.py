"""Sites and data for the batch-script tests; the Intel MPI host and the MPICH images are the
shared fixtures of tests/support/mpi_fixtures.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.showers import tiny_showers
from tests.support.sites import slurm_site_dict, write_site


@pytest.fixture
def slurm_site(tmp_path) -> Path:
    return write_site(tmp_path, slurm_site_dict())


@pytest.fixture(scope="session")
def showers(tmp_path_factory) -> list[Path]:
    return tiny_showers(tmp_path_factory.mktemp("showers"))
