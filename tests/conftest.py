"""Suite-wide settings. Area fixtures live in tests/<area>/conftest.py."""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

try:  # property tests: a bounded run by default (CI's budget); --hypothesis-profile=long locally
    from hypothesis import HealthCheck, settings

    # derandomize: CI tries the same examples on every run (a new find must not block a landing
    # by chance); the long profile explores at random.
    settings.register_profile("default", max_examples=60, deadline=None, derandomize=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("long", max_examples=5000, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("default")
except ImportError:  # hypothesis arrives with the test extra (scripts/setup.sh)
    pass
os.environ.setdefault("USER", "root")  # ch-run refuses to start without $USER


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A real one-node Slurm (munged + slurmctld + slurmd) for this test session; SLURM_CONF is set."""
    from tests.helpers import require
    from tests.support.slurm import slurm_available, start_slurm

    require(slurm_available(), "Slurm daemons or munge not installed, or not root (scripts/setup.sh)")
    cluster = start_slurm(tmp_path_factory.mktemp("slurm"))
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    yield cluster
    cluster.stop()
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before
