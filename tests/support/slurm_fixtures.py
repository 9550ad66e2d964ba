"""The one-node Slurm of the run (tests/support/slurm.py), a session fixture for every area that
submits jobs. Registered for the whole suite by pytest_plugins in tests/conftest.py."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A real one-node Slurm (munged + slurmctld + slurmd) for this test session; SLURM_CONF is
    set.
    """
    from tests.support.parts import require
    from tests.support.slurm import slurm_available, start_slurm

    require(
        slurm_available(), "Slurm daemons or munge not installed, or not root (scripts/setup.sh)"
    )
    cluster = start_slurm(tmp_path_factory.mktemp("slurm"))
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    yield cluster
    cluster.stop()
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before
