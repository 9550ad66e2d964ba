"""ch-run --join's peer groups against a dead job's leftovers: a job killed at the wrong moment leaves
/dev/shm/ch-run_shm-TAG on its node, and Slurm hands its id out again (a fresh cluster, a controller
after a state reset, MaxJobId). The kit's tag is one per job start, so the later job runs.

Each test starts a fresh cluster whose first job id is that of the dead job, far above what the
suite's own clusters hand out, so no other test run on this machine meets the leftover."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from kit.scale import sweep_jobs
from kit.scale.plan import make_plan, write_plan
from kit.study import ledger
from tests.support.chrun_join import stale_join_group
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.sites import paired_container_site
from tests.support.slurm import slurm_available, start_slurm
from tests.support.studies import study_yaml
from tests.support.training import tiny_train_args

pytestmark = pytest.mark.slow
WAIT = 600  # seconds: a tiny training and its validation


@pytest.fixture
def container_site(
    mpich_system_oci, showers, tmp_path, monkeypatch
) -> tuple[Path, Path, list[Path]]:
    """(site, installed image, showers): tests/support/sites.py's paired_container_site."""
    require(
        slurm_available(), "Slurm daemons or munge not installed, or not root (scripts/setup.sh)"
    )
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return paired_container_site(tmp_path, mpich_system_oci, showers)


@contextmanager
def fresh_cluster(root: Path, monkeypatch) -> Iterator[int]:
    """A fresh one-node Slurm whose first job gets the id this yields (below Slurm's MaxJobId)."""
    job_id = random.randrange(10_000_000, 60_000_000)
    cluster = start_slurm(root, first_job_id=job_id)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    try:
        yield job_id
    except BaseException:
        print(cluster.log())  # shown with the failure: why the node held or failed the job
        raise
    finally:
        cluster.stop()


def test_a_job_given_the_id_of_a_killed_job_runs_beside_its_leftover_peer_group(
    container_site, tmp_path, monkeypatch
):
    """The kit's job gets the dead job's id, and both its steps (training, validation), each in
    ch-run --join, run to the end."""
    site, image, data = container_site
    sweep = data[0].parent / "sweep"
    write_plan(
        make_plan(
            site,
            [1],
            [1],
            threads=None,
            walltime="00:10:00",
            image=str(image),
            python=sys.executable,
            train_args=tiny_train_args(data),
            validate=True,
        ),
        sweep,
    )
    with fresh_cluster(tmp_path / "slurm", monkeypatch) as job_id:
        with stale_join_group(
            image, f"kit-{job_id}"
        ):  # what the job of that id left when it was killed
            [sub] = sweep_jobs.submit(sweep)
            assert sub.job == str(job_id)
            [status] = sweep_jobs.wait(sweep, poll_seconds=2, timeout=WAIT)
    assert status.state == "COMPLETED" and status.result, status.problem
    assert status.physics in ("scored", "no scale"), (
        status.physics_problem
    )  # the second step joined too
    record = json.loads(status.result.read_text())
    assert record["container"] == "charliecloud" and record["job"]["slurm_job_id"] == str(job_id)


def test_a_pilot_given_the_id_of_a_killed_pilot_runs_its_steps_beside_their_leftover_groups(
    container_site, tmp_path, monkeypatch
):
    """A study's pilot: each step is started by `bash -c` from a worker and expands the tag the
    pilot's start drew, with its evaluation's suffix; the dead pilot of the same id left the group
    of its first evaluation's step."""
    site, image, data = container_site
    spec = study_yaml(
        data[0].parent,
        data,
        strategy="random",
        evaluations=1,
        parameters={"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        threads=1,
    )
    d = data[0].parent / "study"
    assert (
        main(
            [
                "study",
                "plan",
                str(spec),
                str(d),
                "--site",
                str(site),
                "--parallel",
                "1",
                "--pilot",
                "1",
                "--image",
                str(image),
                "--python",
                sys.executable,
                "--walltime",
                "00:15:00",
            ]
        )
        == 0
    )
    with fresh_cluster(tmp_path / "slurm", monkeypatch) as job_id:
        with stale_join_group(image, f"kit-{job_id}-e0001"):
            assert main(["study", "run", str(d), "--poll", "1"]) == 0
    [job] = [
        str(j["job"]) for j in yaml.safe_load((d / "pilot" / "jobs.yaml").read_text())["pilot"]
    ]
    [e] = ledger.read(d).evaluations.values()
    assert job == str(job_id) and e.eval_id == "e0001"
    assert e.state == "finished", e.error
    assert json.loads(Path(e.result).read_text())["job"]["slurm_job_id"] == job
