"""`kit scale submit` stopped by Ctrl-C or SIGTERM just after sbatch queued a run's job: the job
is recorded all the same (a job queued but not in jobs.yaml would be queued again by the next
submit: two jobs writing one run's files), the command ends with its one line and 130/143."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from kit.slurm.ledger import read_jobs
from tests.support.interrupts import signalled_env
from tests.support.paths import REPO
from tests.support.sweeps import plan_sweep
from tests.support.training import tiny_train_args

LIMIT = 120  # seconds: a bound only a hung command reaches


def _queued(sweep) -> list[str]:
    """The jobs in the queue whose batch script is one of this sweep's."""
    done = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%o"], capture_output=True, text=True, check=True
    )
    return [line.split("|")[0] for line in done.stdout.splitlines() if str(sweep) in line]


@pytest.mark.parametrize(
    "sig,status,words", [("SIGTERM", 143, "terminated (SIGTERM)"), ("SIGINT", 130, "interrupted")]
)
def test_a_stop_after_sbatch_still_records_the_job_and_the_next_submit_queues_none(
    slurm, slurm_site, showers, tmp_path, sig, status, words
):
    long = tiny_train_args(showers) + (
        "--epochs",
        "500",
    )  # stays queued or running while the test looks
    sweep = plan_sweep(slurm_site, tmp_path / "sweep", long, ranks_per_node=[1])
    tag = f"KIT_TEST_RUN_{uuid.uuid4().hex}"
    try:
        run = subprocess.run(
            [sys.executable, "-m", "tests.support.signal_at", "kit", "scale", "submit", str(sweep)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=LIMIT,
            env=signalled_env(
                **{
                    tag: "1",
                    "KIT_TEST_SIGNAL_AT": f"tempfile.mkstemp|jobs.yaml|1|{sig}",
                    "KIT_TEST_SIGNAL_FIRED": str(tmp_path / "fired"),
                }
            ),
        )
        assert (tmp_path / "fired").exists(), run.stderr
        assert run.returncode == status and run.stderr.splitlines() == [
            f"kit: {words}; outputs are replaced only when complete"
        ], run.stderr
        [job] = _queued(sweep)
        assert read_jobs(sweep) and [e["job"] for e in read_jobs(sweep)["n1-r1-t2"]] == [job]
        again = subprocess.run(
            [sys.executable, "-m", "kit", "scale", "submit", str(sweep)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=LIMIT,
            env=signalled_env(),
        )
        assert again.returncode == 0, again.stderr
        assert _queued(sweep) == [job], "the run was queued twice"
    finally:
        for job in _queued(sweep):
            subprocess.run(["scancel", job], capture_output=True, timeout=LIMIT)
