"""Sweeps through a real Slurm (munged + slurmctld + slurmd on this host): plan, sbatch, srun
--mpi=pmi2, a real 2-rank Horovod training per job, collect, report. One node is all there is
here; the multi-node arithmetic of the report is tested in tests/scale."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from kit.errors import KitError
from kit.mpi import convert_paired
from kit.scale import sweep_jobs
from kit.scale.plan import load_plan
from kit.slurm.ledger import read_jobs
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.sites import write_site
from tests.support.sweeps import plan_sweep
from tests.support.training import tiny_train_args

pytestmark = pytest.mark.slow
WAIT = 420  # seconds: two tiny trainings sharing two cores, TensorFlow start-up included


def test_sweep_is_submitted_once_collected_and_reported(
    slurm, slurm_site, showers, tmp_path, capsys
):
    sweep = plan_sweep(
        slurm_site, tmp_path / "sweep", tiny_train_args(showers), ranks_per_node=[1, 2, 4]
    )
    plan = load_plan(sweep)
    assert [r.run_id for r in plan.runs] == [
        "n1-r1-t2",
        "n1-r2-t1",
    ]  # the node's 2 cores, shared evenly
    assert (
        plan.refused[0]["ranks_per_node"] == 4
        and "fix: at most 2 ranks per node" in plan.refused[0]["reason"]
    )

    first = sweep_jobs.submit(sweep)
    assert [s.note for s in first] == ["submitted", "submitted"] and all(s.job for s in first)
    again = sweep_jobs.submit(sweep)  # nothing is queued twice
    assert all(
        s.job is None and s.note.startswith(f"job {f.job} is ") for s, f in zip(again, first)
    )

    status = sweep_jobs.wait(sweep, poll_seconds=2, timeout=WAIT)
    assert [s.state for s in status] == ["COMPLETED", "COMPLETED"], [s.problem for s in status]
    for s, spec in zip(status, plan.runs):
        result = json.loads(s.result.read_text())
        assert (result["nodes"], result["ranks_per_node"], result["threads_per_rank"]) == (
            1,
            spec.ranks_per_node,
            spec.threads_per_rank,
        )
        assert result["site"] == "localslurm" and result["mpi_library_version"].startswith("MPICH")
        assert result["thread_env"]["OMP_NUM_THREADS"] == str(spec.threads_per_rank)
        assert result["job"] == {"slurm_job_id": s.job, "run_id": spec.run_id}  # which job wrote it
        log = (sweep / "logs" / f"{spec.run_id}-{s.job}.out").read_text()
        assert f"kit: run {spec.run_id} job {s.job} on {slurm.node}: {spec.ranks} ranks" in log
    assert sweep_jobs.submit(sweep)[0].note.startswith("has a result")

    assert main(["scale", "report", str(sweep)]) == 0
    written = capsys.readouterr().out.split()
    assert {Path(p).name for p in written} >= {"report.md", "report.csv", "time_per_epoch.png"}
    md = (sweep / "report" / "report.md").read_text()
    assert "localslurm: 1 ranks/node × 2 threads/rank" in md
    assert "localslurm: 2 ranks/node × 1 threads/rank" in md

    redo = sweep_jobs.submit(sweep, only=["n1-r2-t1"], resubmit=True)
    assert len(redo) == 1 and redo[0].job and redo[0].job != first[1].job
    assert [j["job"] for j in read_jobs(sweep)["n1-r2-t1"]] == [first[1].job, redo[0].job]
    sweep_jobs.wait(sweep, poll_seconds=2, timeout=WAIT)


def test_a_failed_job_is_named_with_the_end_of_its_log(
    slurm, slurm_site, showers, tmp_path, capsys
):
    missing = tmp_path / "no-such-showers.h5"
    sweep = plan_sweep(
        slurm_site,
        tmp_path / "sweep",
        ("--data", str(missing), "--validation-data", str(showers[2]), "--preset", "tiny"),
        ranks_per_node=[2],
    )
    sweep_jobs.submit(sweep)
    sweep_jobs.wait(sweep, poll_seconds=2, timeout=WAIT)
    assert main(["scale", "collect", str(sweep)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "n1-r2-t1 (job" in out and "has no result; its log ends:" in out
    assert "gan3d train: error:" in out and str(missing) in out
    assert "0 of 1 run(s) have results" in out
    assert main(["scale", "report", str(sweep)]) == 1
    assert "no results to report" in capsys.readouterr().err

    one = tmp_path / "one"  # the same through `kit slurm submit`: one run, recorded, its log named
    assert (
        main(
            [
                "slurm",
                "submit",
                "--site",
                str(slurm_site),
                "--no-container",
                "--ranks-per-node",
                "2",
                "--python",
                sys.executable,
                "--walltime",
                "00:05:00",
                "--dir",
                str(one),
                "--run-id",
                "single",
                "--",
                "--data",
                str(missing),
                "--validation-data",
                str(showers[2]),
            ]
        )
        == 0
    )
    job = capsys.readouterr().out.strip()
    assert [j["job"] for j in read_jobs(one)["single"]] == [job]
    log = one / "logs" / f"single-{job}.out"
    for _ in range(60):
        if "gan3d train: error:" in (log.read_text() if log.exists() else ""):
            break
        time.sleep(1)
    assert str(missing) in log.read_text()


@pytest.mark.parametrize("launcher", ["srun", "mpiexec.hydra"])
def test_containerized_job_runs_horovod_on_the_host_intel_mpi(
    launcher, slurm, impi_srun_site, mpich_oci, showers, tmp_path
):
    """The paper's set-up: srun (or, as on SuperMUC-NG, Intel MPI's own Hydra, which starts its
    proxies with srun) starts ch-run --join; inside, Horovod and mpi4py (built on MPICH) load the
    host's Intel MPI through the pair's bind and alias. The image carries MPICH but no
    TensorFlow: the Python stack is bound in from this checkout's venv (a site bakes it into the
    image; the recipe in images/ does) - the only shortcut here, and it is outside the MPI path."""
    require(
        shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)"
    )
    base = Path(sys.base_prefix).resolve()
    require(
        base not in (Path("/usr"), Path("/usr/local")), "venv on the system Python: cannot bind it"
    )
    work = tmp_path / "work"
    work.mkdir()
    site = yaml.safe_load(impi_srun_site.read_text())
    site["name"] = "impi-slurm-ct"
    site["container"]["image_dir"] = str(tmp_path / "images")
    site["container"]["binds"] = [f"{REPO}:{REPO}", f"{base}:{base}", f"{work}:{work}"]
    if launcher != "srun":  # Hydra is the PMI server: no Slurm PMI library for Intel MPI
        site["host_mpi"]["launcher"] = launcher
        site["host_mpi"]["library_dirs"] = site["host_mpi"]["library_dirs"][:1]
        del site["host_mpi"]["env"]["I_MPI_PMI_LIBRARY"]
    site_path = write_site(tmp_path, site)
    images = tmp_path / "images"
    images.mkdir()
    done = convert_paired(mpich_oci, images / "gan3d.sqfs", site_path)
    assert not done.pair.missing
    (images / "gan3d.current").symlink_to("gan3d.sqfs")  # what `kit transfer push --install` leaves
    data = [shutil.copy(f, work / f.name) for f in showers]

    sweep = plan_sweep(
        site_path,
        work / "sweep",
        tiny_train_args([Path(p) for p in data]),
        ranks_per_node=[2],
        image=str(images / "gan3d.sqfs"),
    )
    [sub] = sweep_jobs.submit(sweep)
    launch = (sweep / "scripts" / "n1-r2-t1.sbatch").read_text().splitlines()[-1]
    head = {
        "srun": "srun --mpi=pmi2 ch-run --join ",
        "mpiexec.hydra": f"{site['host_mpi']['prefix']}/bin/mpiexec.hydra -n ${{NRANKS}} ch-run "
        "--join-ct=${RANKS_PER_NODE} ",
    }[launcher]
    assert launch.startswith(head) and f" {images}/gan3d.current -- " in launch
    [status] = sweep_jobs.wait(sweep, poll_seconds=2, timeout=WAIT)
    assert status.state == "COMPLETED" and status.result, status.problem
    result = json.loads(status.result.read_text())
    assert result["ranks"] == 2 and result["site"] == "impi-slurm-ct"
    assert result["mpi_library_version"].startswith("Intel(R) MPI Library"), result[
        "mpi_library_version"
    ]
    assert len(set(result["weights_sha256_per_rank"])) == 1  # Horovod kept both ranks in step
    assert (
        result["image_digest"] == "sha256:" + (images / "gan3d.sqfs.sha256").read_text().split()[0]
    )


def test_cancel_stops_the_queued_and_running_jobs_of_a_plan(
    slurm, slurm_site, showers, tmp_path, capsys
):
    long = tiny_train_args(showers) + ("--epochs", "500")  # the later --epochs wins: hours of work
    sweep = plan_sweep(slurm_site, tmp_path / "sweep", long, ranks_per_node=[1, 2])
    jobs = {s.run_id: s.job for s in sweep_jobs.submit(sweep)}
    assert main(["scale", "cancel", str(sweep), "--dry-run"]) == 0
    assert capsys.readouterr().out.count("would cancel") == 2
    assert all(s.active and not s.result for s in sweep_jobs.collect(sweep))
    assert main(["scale", "cancel", str(sweep), "--only", "n1-r1-t2"]) == 0
    assert capsys.readouterr().out.strip() == f"cancelled n1-r1-t2 (job {jobs['n1-r1-t2']})"
    assert sorted(sweep_jobs.cancel(sweep)) == [("n1-r2-t1", jobs["n1-r2-t1"])]
    status = sweep_jobs.wait(sweep, poll_seconds=1, timeout=120)
    assert [s.state for s in status] == ["CANCELLED", "CANCELLED"] and not any(
        s.result for s in status
    )
    assert main(["scale", "cancel", str(sweep)]) == 0
    assert "no run of the plan is queued or running" in capsys.readouterr().out


def test_a_run_held_in_the_queue_is_shown_with_its_reason_and_waiting_stops(
    slurm, slurm_site, showers, tmp_path, capsys
):
    import subprocess

    def scontrol(*args: str) -> None:
        subprocess.run(
            ["scontrol", *args], check=True, capture_output=True
        )  # SLURM_CONF: the fixture

    sweep = plan_sweep(slurm_site, tmp_path / "sweep", tiny_train_args(showers), ranks_per_node=[2])
    scontrol(
        "update", f"NodeName={slurm.node}", "State=DRAIN", "Reason=kit-test"
    )  # nothing may start yet
    try:
        [sub] = sweep_jobs.submit(sweep)
        scontrol("hold", sub.job)  # as an admin (or a wrapper) would
    finally:
        scontrol("update", f"NodeName={slurm.node}", "State=RESUME")
    with pytest.raises(
        KitError,
        match=rf"n1-r2-t1 \(job {sub.job}, PENDING \(JobHeld(User|Admin)\)\).*kit scale cancel",
    ):
        sweep_jobs.wait(sweep, poll_seconds=1, timeout=60)
    assert main(["scale", "collect", str(sweep)]) == 0  # nothing failed yet
    assert "PENDING (JobHeld" in capsys.readouterr().out
    assert sweep_jobs.submit(sweep)[0].note.startswith(
        f"job {sub.job} is PENDING (JobHeld"
    )  # not queued twice
    again = sweep_jobs.submit(sweep, resubmit=True)[0]  # never beside a job of the same run
    assert again.job is None and again.note.endswith(": cancel it first")
    stale = sweep / "results" / "n1-r2-t1.json"  # left by an earlier job: not this job's result
    stale.write_text(
        json.dumps({"schema": "gan3d-run/1", "job": {"slurm_job_id": str(int(sub.job) + 1000)}})
    )
    assert sweep_jobs.collect(sweep)[0].result is None
    sweep_jobs.cancel(sweep)
    assert sweep_jobs.collect(sweep)[0].state.startswith("CANCELLED")
