"""ch-run --join's peer groups against a dead job's leftovers: a job killed at the wrong moment leaves
/dev/shm/ch-run_shm-TAG on its node, and Slurm hands its id out again (a fresh cluster, a controller
after a state reset, MaxJobId). The kit's tag is one per job start, so the later job runs."""
from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import pytest

from kit.mpi import convert_paired
from kit.scale import sweep_jobs
from kit.scale.plan import make_plan, write_plan
from tests.helpers import require, stale_join_group
from tests.slurm.conftest import REPO, slurm_site_dict, tiny_train_args, write_site
from tests.support.slurm import slurm_available, start_slurm

pytestmark = pytest.mark.slow
WAIT = 600  # seconds: a tiny training and its validation


def test_a_job_given_the_id_of_a_killed_job_runs_beside_its_leftover_peer_group(
        mpich_system_oci, showers, tmp_path, monkeypatch):
    """A fresh cluster whose first job id is that of a job whose ch-run group was killed on this node
    (a real ch-run --join, SIGKILLed; an id far above what the suite's own clusters hand out, so no
    other test run meets the leftover): the kit's job gets that id and both its steps (training,
    validation), each in ch-run --join with the host's MPICH bound in, run to the end."""
    require(shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)")
    require(slurm_available(), "Slurm daemons or munge not installed, or not root (scripts/setup.sh)")
    base, venv = Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()
    require(base not in (Path("/usr"), Path("/usr/local")), "venv on the system Python: cannot bind it")
    work = tmp_path / "work"
    work.mkdir()
    doc = slurm_site_dict("localslurm-ct")
    doc["container"]["image_dir"] = str(tmp_path / "images")
    doc["container"]["binds"] = [f"{p}:{p}" for p in sorted({str(REPO), str(base), str(venv), str(work)})]
    site = write_site(tmp_path, doc)
    image = tmp_path / "images" / "gan3d.sqfs"
    assert not convert_paired(mpich_system_oci, image, site).pair.missing
    (tmp_path / "images" / "gan3d.current").symlink_to("gan3d.sqfs")  # what `kit transfer push --install` leaves
    data = [Path(shutil.copy(f, work / f.name)) for f in showers]
    sweep = work / "sweep"
    write_plan(make_plan(site, [1], [1], None, "00:10:00", image=str(image), python=sys.executable,
                         train_args=tiny_train_args(data), validate=True), sweep)
    monkeypatch.setenv("PYTHONPATH", str(REPO))

    job_id = random.randrange(10_000_000, 60_000_000)  # below Slurm's MaxJobId
    cluster = start_slurm(tmp_path / "slurm", first_job_id=job_id)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    try:
        with stale_join_group(image, f"kit-{job_id}"):  # what the job of that id left when it was killed
            [sub] = sweep_jobs.submit(sweep)
            assert sub.job == str(job_id)
            [status] = sweep_jobs.wait(sweep, poll_seconds=2, timeout=WAIT)
    finally:
        cluster.stop()
    assert status.state == "COMPLETED" and status.result, status.problem
    assert status.physics in ("scored", "no scale"), status.physics_problem  # the second step joined too
    record = json.loads(status.result.read_text())
    assert record["container"] == "charliecloud" and record["job"]["slurm_job_id"] == str(job_id)
