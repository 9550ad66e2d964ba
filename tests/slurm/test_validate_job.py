"""`kit scale plan --validate` through a real one-node Slurm: each job trains the tiny preset, then
runs gan3d validate on its final checkpoint with one rank through the same launcher; collect picks
the score up and the report shows it with the generated-vs-data plots. A validation that fails (its
output directory blocked by a file) marks only that run's physics, with its log."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest

from gan3d.results import SCHEMA
from kit.cli import main
from kit.scale import load_results, sweep_jobs
from kit.scale.plan import make_plan, write_plan
from kit.slurm import RunFiles
from tests.support.training import tiny_train_args

pytestmark = pytest.mark.slow
WAIT = 600  # seconds: two tiny trainings and their validations, one after the other on two cores


def test_each_run_is_validated_in_its_job_and_a_failed_validation_marks_only_its_physics(
    slurm, slurm_site, showers, tmp_path, capsys
):
    sweep = tmp_path / "sweep"
    write_plan(
        make_plan(
            slurm_site,
            [1],
            [1],
            threads=None,
            walltime="00:10:00",
            python=sys.executable,
            train_args=tiny_train_args(showers),
            repeats=2,
            validate=True,
        ),
        sweep,
    )
    good, blocked = (RunFiles(sweep.absolute(), run) for run in ("n1-r1-t2-x1", "n1-r1-t2-x2"))
    blocked.physics_dir.parent.mkdir(parents=True)
    blocked.physics_dir.write_text(
        "in the way\n"
    )  # gan3d validate cannot make its plot directory here
    assert [s.note for s in sweep_jobs.submit(sweep)] == ["submitted", "submitted"]

    status = {s.run_id: s for s in sweep_jobs.wait(sweep, poll_seconds=2, timeout=WAIT)}
    ok, failed = status[good.run_id], status[blocked.run_id]
    assert ok.state == failed.state == "COMPLETED", (ok.problem, failed.problem)
    assert (
        ok.result and failed.result and not ok.problem and not failed.problem
    )  # both runs have results
    assert ok.physics in ("scored", "no scale") and not ok.physics_problem
    assert failed.physics == "failed" and f"{blocked.physics_dir}" in failed.physics_problem
    assert "gan3d validate: error:" in failed.physics_problem  # the validation log's tail

    record = json.loads(ok.result.read_text())
    physics = record["physics"]
    assert record["schema"] == SCHEMA and record["status"] == "ok"  # training's record, kept whole
    assert physics["preset"] == "tiny" and Path(physics["generator_weights"]).is_relative_to(
        good.checkpoints
    )
    assert (
        physics["score_reference_empty"] > physics["score_reference_data"] > 0
    )  # the raw terms are kept
    assert (
        physics["compared_events"] + physics["reference_events"] == physics["events"] == 64
    )  # showers[2]
    assert (good.physics_dir / "physics_score.png").read_bytes().startswith(b"\x89PNG")
    assert "physics" not in json.loads(failed.result.read_text())

    assert (
        main(["scale", "collect", str(sweep), "--json"]) == 0
    )  # a failed validation is not a failed run
    doc = json.loads(capsys.readouterr().out)
    assert [(r["run"], r["physics"]) for r in doc["runs"]] == [
        (good.run_id, ok.physics),
        (blocked.run_id, "failed"),
    ]

    assert main(["scale", "report", str(sweep)]) == 0
    capsys.readouterr()
    report = sweep / "report"
    assert (report / "physics" / good.run_id / "physics_score.png").read_bytes() == (
        good.physics_dir / "physics_score.png"
    ).read_bytes()  # the validator's own plots, copied
    rows = {
        line.split("|")[1].strip(): line
        for line in (report / "report.md").read_text().splitlines()
        if line.startswith("| n1-r1-t2-x")
    }
    [run] = [r for r in load_results([ok.result])]
    shown = f"{run.physics.score:.3f}" if run.physics.score is not None else "no scale: "
    assert (
        f"| {shown}" in rows[good.run_id]
        and "(physics/n1-r1-t2-x1/physics_score.png)" in rows[good.run_id]
    )
    assert "(physics/n1-r1-t2-x1/physics_cellsum_vs_energy.png)" in rows[good.run_id]
    failed_cell = (
        rows[blocked.run_id].split("|")[8].strip()
    )  # not "-", the cell of a run never validated
    assert (
        failed_cell.startswith("failed: gan3d validate: error:")
        and str(blocked.physics_dir) in failed_cell
    )
    csv_rows = {
        r["path"]: r for r in csv.DictReader(io.StringIO((report / "report.csv").read_text()))
    }
    assert csv_rows[str(blocked.result)]["physics_status"] == "failed"
    assert csv_rows[str(blocked.result)]["physics_problem"] in failed_cell
    good_row = csv_rows[str(good.result)]
    assert good_row["physics_status"] == ok.physics and not good_row["physics_problem"]
    assert (report / f"losses/{good.run_id}.png").is_file()  # 2 epochs of real losses drawn


def test_a_container_run_is_validated_inside_the_same_container(
    slurm, mpich_system_oci, showers, tmp_path, monkeypatch
):
    """srun --mpi=pmi2 ch-run --join: the MPICH test image with the host's MPICH bound in (the pair),
    the venv's Python and this checkout bound in (PYTHONPATH, exported by sbatch through ch-run) as
    tests/scale/test_container_pair.py does; validation goes the same way."""
    import yaml

    from tests.support.paths import REPO
    from tests.support.sites import paired_container_site

    site, image, data = paired_container_site(tmp_path, mpich_system_oci, showers)
    work = data[0].parent
    sweep = work / "sweep"
    write_plan(
        make_plan(
            site,
            [1],
            [1],
            threads=None,
            walltime="00:10:00",
            image=str(tmp_path / "images" / "gan3d.sqfs"),
            python=sys.executable,
            train_args=tiny_train_args(data),
            validate=True,
        ),
        sweep,
    )
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    [sub] = sweep_jobs.submit(sweep)
    script = (sweep / "scripts" / f"{sub.run_id}.sbatch").read_text()
    assert script.count("ch-run --join") == 2  # training and validation, each inside the image
    [status] = sweep_jobs.wait(sweep, poll_seconds=2, timeout=WAIT)
    assert status.state == "COMPLETED" and status.result, status.problem
    assert status.physics in ("scored", "no scale"), status.physics_problem
    record = json.loads(status.result.read_text())
    assert record["container"] == "charliecloud" and record["physics"]["preset"] == "tiny"
    assert yaml.safe_load((sweep / "plan.yaml").read_text())["validate"] is True
