"""Real studies through this machine's one-node Slurm (tests/support/slurm.py): each evaluation a
Slurm job of kit scale's own making, or, in pilot mode, a step of one pilot job. The tiny preset,
two steps; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from kit.slurm.jobs import is_active, job_states
from kit.study import ledger
from kit.study.run import run_study
from tests.support.paths import REPO
from tests.support.sites import slurm_site_dict, write_site
from tests.support.studies import PNG_MAGIC, in_flight_over_time, study_yaml

WAIT = 900


def _site(tmp_path: Path) -> Path:
    return write_site(tmp_path, slurm_site_dict())


def _jobs(study_dir: Path, eval_id: str) -> list[str]:
    doc = yaml.safe_load((study_dir / "evals" / eval_id / "jobs.yaml").read_text())
    return [str(e["job"]) for e in doc[eval_id]]


@pytest.mark.slow
def test_slurm_grid_of_4_each_evaluation_one_job(slurm, showers, tmp_path):
    spec = study_yaml(
        tmp_path,
        showers,
        strategy="grid",
        evaluations=4,
        objective="showers_per_second",
        direction="maximize",
        parameters={
            "optimizer": {"type": "choice", "values": ["rmsprop", "adam"]},
            "lr": {"type": "choice", "values": [0.001, 0.002]},
        },
    )
    d = tmp_path / "study"
    assert (
        main(
            [
                "study",
                "plan",
                str(spec),
                str(d),
                "--site",
                str(_site(tmp_path)),
                "--parallel",
                "2",
                "--python",
                sys.executable,
                "--walltime",
                "00:10:00",
            ]
        )
        == 0
    )
    assert main(["study", "run", str(d), "--poll", "1"]) == 0
    led = ledger.read(d)
    assert len(led.evaluations) == 4 and all(
        e.state == "finished" for e in led.evaluations.values()
    ), [e.error for e in led.evaluations.values()]
    jobs = set()
    for e in led.evaluations.values():
        [job] = _jobs(d, e.eval_id)  # one job per evaluation, recorded by kit scale's submission
        assert e.submissions[0]["job"] == job
        record = json.loads(Path(e.result).read_text())
        assert record["job"]["slurm_job_id"] == job and record["optimizer"] == e.config["optimizer"]
        assert (
            record["learning_rate"]["per_rank"] == e.config["lr"]
            and e.objective == record["showers_per_second"]
        )
        jobs.add(job)
    assert len(jobs) == 4 and max(in_flight_over_time(d)) == 2


@pytest.mark.slow
def test_slurm_mbo_killed_then_cancelled_resumes_to_exactly_6(slurm, showers, tmp_path):
    spec = study_yaml(
        tmp_path,
        showers,
        strategy="mbo",
        evaluations=6,
        parameters={
            "lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "optimizer": {"type": "choice", "values": ["rmsprop", "adam"]},
        },
    )
    d = tmp_path / "study"
    assert (
        main(
            [
                "study",
                "plan",
                str(spec),
                str(d),
                "--site",
                str(_site(tmp_path)),
                "--parallel",
                "2",
                "--python",
                sys.executable,
                "--walltime",
                "00:10:00",
            ]
        )
        == 0
    )
    driver = subprocess.Popen(
        [sys.executable, "-m", "kit", "study", "run", str(d), "--poll", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        time.sleep(1)
        led = ledger.read(d)
        if len(led.done()) >= 2 and len([e for e in led.in_flight() if e.submissions]) == 2:
            break
    else:
        driver.kill()
        pytest.fail(f"the study did not get half way: {driver.stderr.read()}")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    assert (
        main(["study", "cancel", str(d)]) == 0
    )  # scancel what the dead driver left queued or running
    led = ledger.read(d)
    cancelled = [e.eval_id for e in led.evaluations.values() if e.state == "cancelled"]
    assert len(cancelled) == 2
    jobs = [
        _jobs(d, e)[-1] for e in cancelled
    ]  # gone once cancel returns: none left COMPLETING to re-attach to
    assert not any(is_active(state) for state in job_states(jobs).values())
    final = run_study(d, poll_seconds=1)
    led = ledger.read(d)
    assert final.done == 6 and len(led.evaluations) == 6
    assert all(e.state == "finished" for e in led.evaluations.values()), [
        e.error for e in led.evaluations.values()
    ]
    for eid in cancelled:  # run again in a new job after the cancel; the result is the new job's
        jobs = _jobs(d, eid)
        assert len(jobs) == 2
        assert (
            json.loads(Path(led.evaluations[eid].result).read_text())["job"]["slurm_job_id"]
            == jobs[-1]
        )
    for e in led.evaluations.values():
        if e.eval_id not in cancelled:
            assert len(_jobs(d, e.eval_id)) == 1  # never a second job beside the first
    assert main(["study", "report", str(d)]) == 0
    assert (d / "report" / "surrogate.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_pilot_runs_every_evaluation_inside_one_job(slurm, showers, tmp_path):
    spec = study_yaml(
        tmp_path,
        showers,
        strategy="random",
        evaluations=3,
        parameters={"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        threads=1,
    )  # 2 steps side by side
    d = tmp_path / "study"
    assert (
        main(
            [
                "study",
                "plan",
                str(spec),
                str(d),
                "--site",
                str(_site(tmp_path)),
                "--parallel",
                "2",
                "--pilot",
                "1",
                "--python",
                sys.executable,
                "--walltime",
                "00:15:00",
            ]
        )
        == 0
    )
    assert main(["study", "run", str(d), "--poll", "1"]) == 0
    led = ledger.read(d)
    assert len(led.evaluations) == 3 and all(
        e.state == "finished" for e in led.evaluations.values()
    ), [e.error for e in led.evaluations.values()]
    pilot_jobs = yaml.safe_load((d / "pilot" / "jobs.yaml").read_text())["pilot"]
    assert len(pilot_jobs) == 1  # one allocation for the whole study
    job = str(pilot_jobs[0]["job"])
    for e in led.evaluations.values():
        record = json.loads(
            Path(e.result).read_text()
        )  # one result per evaluation, written inside the pilot
        assert record["job"]["slurm_job_id"] == job and record["job"]["run_id"] == e.eval_id
        assert record["learning_rate"]["per_rank"] == pytest.approx(e.config["lr"], rel=1e-9)
        assert {s["job"] for s in e.submissions} == {job}
    assert not any((d / "queue").glob("e*")) and sorted(
        p.name for p in (d / "claimed").iterdir()
    ) == sorted(led.evaluations)


@pytest.mark.slow
def test_physics_score_through_slurm_jobs_each_a_validated_run(slurm, showers, tmp_path):
    """Each evaluation is a `kit scale plan --validate` run: its job trains, then `gan3d validate`
    scores the final checkpoint against the showers it generated (kept in EVALDIR/synthetic); the
    study's objective is that score, read here from each run's results file."""
    spec = study_yaml(
        tmp_path,
        showers,
        strategy="random",
        evaluations=2,
        objective="physics_score",
        direction="maximize",
        parameters={"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        synthetic=64,
    )
    spec.write_text(
        "\n".join(line for line in spec.read_text().splitlines() if "data:" not in line) + "\n"
    )
    d = tmp_path / "study"
    assert (
        main(
            [
                "study",
                "plan",
                str(spec),
                str(d),
                "--site",
                str(_site(tmp_path)),
                "--parallel",
                "2",
                "--python",
                sys.executable,
                "--walltime",
                "00:15:00",
            ]
        )
        == 0
    )
    assert main(["study", "run", str(d), "--poll", "1"]) == 0
    led = ledger.read(d)
    assert len(led.evaluations) == 2 and all(
        e.state == "finished" for e in led.evaluations.values()
    ), [e.error for e in led.evaluations.values()]
    for e in led.evaluations.values():
        [job] = _jobs(d, e.eval_id)
        record = json.loads((d / "evals" / e.eval_id / "results" / f"{e.eval_id}.json").read_text())
        assert record["job"]["slurm_job_id"] == job and e.submissions[0]["job"] == job
        assert (
            isinstance(record["physics"]["score"], float)
            and e.objective == record["physics"]["score"]
        )
        synthetic = d / "evals" / e.eval_id / "synthetic"
        assert (
            len(list(synthetic.glob("*.h5"))) == 2 and record["physics"]["events"] == 64
        )  # its own showers
        assert Path(record["physics"]["generator_weights"]).is_relative_to(
            d / "evals" / e.eval_id / "checkpoints"
        )
        assert (
            d / "evals" / e.eval_id / "results" / f"{e.eval_id}.physics" / "physics_score.png"
        ).is_file()


@pytest.mark.slow
def test_pilot_runs_each_evaluation_in_the_image_through_the_pair(
    slurm, mpich_system_oci, showers, tmp_path, monkeypatch
):
    """A study planned with --image: the pilot's steps are srun --mpi=pmi2 ch-run --join with the host's
    MPICH bound in (the pair), as a batch script's; the venv's Python and this checkout are bound in
    (PYTHONPATH reaches the ranks through sbatch and ch-run), as tests/slurm/test_validate_job.py does.
    Two evaluations side by side in one allocation, each its own ch-run peer group."""
    from tests.support.sites import paired_container_site

    site, image, data = paired_container_site(tmp_path, mpich_system_oci, showers)
    work = data[0].parent
    spec = study_yaml(
        work,
        data,
        strategy="random",
        evaluations=2,
        parameters={"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        threads=1,
    )
    d = work / "study"
    monkeypatch.setenv("PYTHONPATH", str(REPO))
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
                "2",
                "--pilot",
                "1",
                "--image",
                str(tmp_path / "images" / "gan3d.sqfs"),
                "--python",
                sys.executable,
                "--walltime",
                "00:15:00",
            ]
        )
        == 0
    )
    assert main(["study", "run", str(d), "--poll", "1"]) == 0
    led = ledger.read(d)
    assert len(led.evaluations) == 2 and all(
        e.state == "finished" for e in led.evaluations.values()
    ), [e.error for e in led.evaluations.values()]
    [job] = [
        str(j["job"]) for j in yaml.safe_load((d / "pilot" / "jobs.yaml").read_text())["pilot"]
    ]
    digest = "sha256:" + (tmp_path / "images" / "gan3d.sqfs.sha256").read_text().split()[0]
    for e in led.evaluations.values():
        record = json.loads(Path(e.result).read_text())
        assert record["container"] == "charliecloud" and record["image_digest"] == digest
        assert record["job"]["slurm_job_id"] == job and record["job"]["run_id"] == e.eval_id
        [train] = json.loads((d / "evals" / e.eval_id / "eval.json").read_text())["commands"]
        assert (
            train[:2] == ["bash", "-c"] and f"--join-tag=${{KIT_JOIN_TAG}}-{e.eval_id}" in train[2]
        )
        assert (
            f"{tmp_path / 'images' / 'gan3d.current'} -- " in train[2] and "--ntasks=1" in train[2]
        )
