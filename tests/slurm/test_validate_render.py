"""`kit scale plan --validate`: the batch script's physics step, read back from the rendered script
(bare and through the container pair), and what is refused before a job is queued. The jobs
themselves run in tests/slurm/test_validate_job.py."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from kit.cli import main
from kit.errors import KitError
from kit.mpi import convert_paired
from kit.mpi.pair_reader import read_pair_file
from kit.scale.plan import load_plan, make_plan, write_plan
from kit.site import load_site
from kit.slurm import RunFiles, check_run, render
from tests.support.chrun_join import join_tags
from tests.support.sites import slurm_site_dict, write_site
from tests.support.training import tiny_train_args


def _steps(script: str) -> tuple[list[str], list[str]]:
    """The training launch words and the validation launch words of a rendered script."""
    lines = [line for line in script.splitlines() if not line.startswith("#")]
    train = next(line for line in lines if " gan3d train " in line)
    check = next(line for line in lines if " gan3d validate " in line)
    return shlex.split(train), shlex.split(check.replace(') >"$VALIDATE_LOG" 2>&1; then', ""))


def test_the_plan_records_validate_and_each_script_validates_its_own_checkpoint(
    slurm_site, tmp_path
):
    files = [tmp_path / f"f{i}.h5" for i in range(3)]
    sweep = tmp_path / "sweep"
    write_plan(
        make_plan(
            slurm_site,
            [1],
            [1, 2],
            threads=None,
            walltime="00:10:00",
            train_args=tiny_train_args(files) + ("--xscale", "2"),
            validate=True,
        ),
        sweep,
    )
    plan = load_plan(sweep)
    assert plan.validate and all(r.validate for r in plan.runs)
    site = plan.load_site()
    for spec in plan.runs:
        run = RunFiles(sweep.absolute(), spec.run_id)
        script = render(site, check_run(site, spec), run, pair=None)
        train, check = _steps(script)
        assert train[train.index("--checkpoint-dir") + 1] == str(run.checkpoints)
        assert check[check.index("validate") + 1 :] == [
            "--checkpoint",
            str(run.checkpoints),
            "--data",
            str(files[2]),
            "--out",
            str(run.physics_dir),
            "--results",
            str(run.result),
            "--xscale",
            "2",
        ]  # --validation-data first; the training's xscale
        assert "export NRANKS=1 RANKS_PER_NODE=1 SLURM_NTASKS=1" in script  # one rank, one node
        assert (
            f'VALIDATE_LOG={sweep.absolute()}/logs/{spec.run_id}-"${{SLURM_JOB_ID}}".validate.out'
            in script
        )
        assert script.index(" gan3d train ") < script.index(" gan3d validate ")


def test_without_validate_the_script_has_no_physics_step(slurm_site, tmp_path):
    plan = make_plan(
        slurm_site,
        [1],
        [1],
        threads=None,
        walltime="00:10:00",
        train_args=tiny_train_args([tmp_path / "f.h5"] * 3),
    )
    site = plan.load_site()
    script = render(
        site, check_run(site, plan.runs[0]), RunFiles(tmp_path, plan.runs[0].run_id), pair=None
    )
    assert "gan3d validate" not in script and "--checkpoint-dir" not in script
    assert " gan3d train " in script.rstrip("\n").splitlines()[-1]  # the launch stays the last line


def test_validation_runs_in_the_container_with_its_paths_translated(mpich_system_oci, tmp_path):
    doc = slurm_site_dict("boundslurm")
    doc["container"]["binds"] = [f"{tmp_path}/work:/work"]
    site = load_site(write_site(tmp_path, doc))
    pair = read_pair_file(
        convert_paired(mpich_system_oci, tmp_path / "img.tar", site).pair_file, site
    )
    data = [tmp_path / "work" / f"f{i}.h5" for i in range(3)]
    plan = make_plan(
        site,
        [1],
        [2],
        threads=None,
        walltime="00:10:00",
        train_args=tiny_train_args(data),
        validate=True,
    )
    script = render(
        site,
        check_run(site, plan.runs[0]),
        RunFiles(tmp_path / "work" / "sweep", "n1-r2-t1"),
        pair=pair,
    )
    train, check = _steps(script)
    assert (
        train[: train.index("--") + 1][:3]
        == check[: check.index("--") + 1][:3]
        == ["srun", "--mpi=pmi2", "ch-run"]
    )
    # one peer-group tag per start of the job, the same for both steps (they run one after the other)
    first, again = join_tags(script, "77"), join_tags(script, "77")
    assert len(first) == 2 and first[0] == first[1] and again[0] == again[1] != first[0]
    assert check[check.index("--") + 1 :][3:] == [
        "validate",
        "--checkpoint",
        "/work/sweep/checkpoints/n1-r2-t1",
        "--data",
        "/work/f2.h5",
        "--out",
        "/work/sweep/results/n1-r2-t1.physics",
        "--results",
        "/work/sweep/results/n1-r2-t1.json",
    ]


def test_the_cli_plan_says_what_each_job_validates_against(slurm_site, tmp_path, capsys):
    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                str(slurm_site),
                "--no-container",
                "--nodes",
                "1",
                "--validate",
                "--dir",
                str(tmp_path / "s"),
                "--",
                "--data",
                "/d/a.h5",
                "--validation-data",
                "/d/v.h5",
            ]
        )
        == 0
    )
    assert "gan3d validate on its final checkpoint against /d/v.h5" in " ".join(
        capsys.readouterr().out.split()
    )
    assert load_plan(tmp_path / "s").validate


def test_validate_without_data_is_refused_before_anything_is_written(slurm_site, tmp_path, capsys):
    with pytest.raises(
        KitError,
        match="--validate: the training arguments name no --data, "
        "--validation-data or --synthetic-dir",
    ):
        make_plan(
            slurm_site,
            [1],
            [1],
            threads=None,
            walltime="00:10:00",
            train_args=("--synthetic", "64"),
            validate=True,
        )
    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                str(slurm_site),
                "--no-container",
                "--nodes",
                "1",
                "--validate",
                "--dir",
                str(tmp_path / "s"),
                "--",
                "--synthetic",
                "64",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "fix: give --data FILES after --" in err
        and not (tmp_path / "s").exists()
    )


def test_a_plan_without_the_validate_key_loads_as_not_validated(slurm_site, tmp_path):
    write_plan(make_plan(slurm_site, [1], [1], threads=None, walltime="00:10:00"), tmp_path)
    path = tmp_path / "plan.yaml"
    path.write_text(
        "".join(
            line
            for line in path.read_text().splitlines(keepends=True)
            if not line.startswith("validate:")
        )
    )
    assert not load_plan(tmp_path).validate
    path.write_text(path.read_text().replace("walltime:", "validate: 'yes'\nwalltime:"))
    with pytest.raises(KitError, match=r"plan.yaml:\d+: validate: .*expected true or false"):
        load_plan(tmp_path)


def test_old_plans_and_the_physics_dir_stay_beside_the_results():
    files = RunFiles(Path("/w/sweep"), "n1-r1-t2")
    assert files.physics_dir == Path("/w/sweep/results/n1-r1-t2.physics")
    assert files.validate_log("17") == Path("/w/sweep/logs/n1-r1-t2-17.validate.out")
