"""Sweep plans: what goes in, what is left out and why, and that a plan is never silently replaced.
SuperMUC-NG's sweep is only planned here (no 768-node machine); submission is in tests/slurm."""

from __future__ import annotations

import pytest

from kit.cli import main
from kit.errors import KitError
from kit.scale import sweep_jobs
from kit.scale.plan import load_plan, make_plan, write_plan


def _sng_plan(**kw):
    return make_plan(
        "supermuc-ng",
        kw.pop("nodes", [4, 8, 768, 1024]),
        kw.pop("ranks_per_node", [1, 2, 4]),
        threads=kw.pop("threads", None),
        walltime="02:00:00",
        **kw,
    )


def test_the_papers_layouts_are_planned_and_impossible_ones_left_out_with_the_reason():
    plan = _sng_plan()
    ids = [r.run_id for r in plan.runs]
    assert ids[:3] == ["n4-r1-t48", "n4-r2-t24", "n4-r4-t12"]  # one thread per physical core
    assert "n768-r4-t12" in ids and not any(i.startswith("n1024-") for i in ids)
    assert len(plan.refused) == 3 and all("allows 1..768" in r["reason"] for r in plan.refused)
    hyper = _sng_plan(nodes=[8], ranks_per_node=[2], threads=[48, 64])
    assert [r.run_id for r in hyper.runs] == ["n8-r2-t48"]  # Table 2's layout, on hyperthreads
    assert (
        "= 128, but a supermuc-ng node has 48 cores x 2 hardware threads = 96"
        in hyper.refused[0]["reason"]
    )
    with pytest.raises(KitError, match="no run of the sweep fits site supermuc-ng: --nodes 1024"):
        _sng_plan(nodes=[1024])


def test_a_plan_is_written_once_and_never_replaced_by_another(tmp_path):
    plan = _sng_plan(train_args=("--epochs", "2"))
    path = write_plan(plan, tmp_path)
    assert load_plan(tmp_path) == plan
    assert write_plan(plan, tmp_path) == path  # the same plan again: fine
    with pytest.raises(KitError, match="exists with another plan"):
        write_plan(_sng_plan(nodes=[4]), tmp_path)
    assert load_plan(tmp_path) == plan
    path.write_text("kit_plan: 1\nsite: x\n")
    with pytest.raises(
        KitError, match=r"plan.yaml:1: train_args: missing required key \(a list of strings\)"
    ):
        load_plan(tmp_path)
    with pytest.raises(KitError, match="no plan here; fix: kit scale plan --dir"):
        load_plan(tmp_path / "elsewhere")


def test_dry_run_submission_checks_every_run_and_writes_nothing(tmp_path, capsys):
    write_plan(_sng_plan(nodes=[4, 8]), tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = sweep_jobs.submit(tmp_path, dry_run=True)
    assert [s.note for s in out] == ["dry run: would sbatch"] * 6 and not any(s.job for s in out)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    with pytest.raises(KitError, match=r"--only n9-r9-t9: not in the plan"):
        sweep_jobs.submit(tmp_path, dry_run=True, only=["n9-r9-t9"])
    assert main(["scale", "submit", str(tmp_path), "--dry-run", "--only", "n8-r4-t12"]) == 0
    assert "n8-r4-t12" in capsys.readouterr().out


def test_cli_plan_lists_runs_and_reasons(tmp_path, capsys):
    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                "supermuc-ng",
                "--no-container",
                "--nodes",
                "4,8",
                "--ranks-per-node",
                "4",
                "--threads",
                "12,24",
                "--dir",
                str(tmp_path / "s"),
                "--",
                "--epochs",
                "1",
            ]
        )
        == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "n4-r4-t12" in out and "n8-r4-t24" in out and "left out" not in out
    )  # 4 x 24 = 96 fits (HT)
    assert load_plan(tmp_path / "s").train_args == ("--epochs", "1")
    with pytest.raises(SystemExit):
        main(
            [
                "scale",
                "plan",
                "--site",
                "supermuc-ng",
                "--no-container",
                "--nodes",
                "x",
                "--dir",
                str(tmp_path / "t"),
            ]
        )
    assert "give comma-separated whole numbers" in capsys.readouterr().err


def test_a_plan_the_jobs_could_not_use_is_refused_before_it_is_written(tmp_path):
    bad = tmp_path / "my sweep"
    with pytest.raises(KitError, match="use an absolute path of letters"):
        write_plan(_sng_plan(nodes=[4]), bad)
    assert not (bad / "plan.yaml").exists()
    with pytest.raises(
        KitError,
        match="training arguments --checkpoint-dir: every run of the sweep would write the same",
    ):
        _sng_plan(train_args=("--checkpoint-dir", "/x"))
    with pytest.raises(
        KitError, match="training arguments --checkpoint=/x: every run"
    ):  # argparse's abbreviation
        _sng_plan(train_args=("--checkpoint=/x",))
    assert (
        len(_sng_plan(nodes=[4], ranks_per_node=[4], train_args=("--checkpoint-dir", "/x")).runs)
        == 1
    )


def test_the_same_sweep_named_by_a_relative_or_absolute_site_path_is_the_same_plan(
    tmp_path, monkeypatch
):
    from kit.site.load import SHIPPED_DIR

    monkeypatch.chdir(SHIPPED_DIR.parent)
    write_plan(
        make_plan(
            "site-configs/supermuc-ng.yaml", [1024, 4], [4], threads=None, walltime="01:00:00"
        ),
        tmp_path,
    )
    write_plan(
        make_plan(
            str(SHIPPED_DIR / "supermuc-ng.yaml"), [1024, 4], [4], threads=None, walltime="01:00:00"
        ),
        tmp_path,
    )


def test_a_corrupt_result_is_no_result(tmp_path):
    """A job killed while writing leaves a broken file: the run is not done and is submitted
    again.
    """
    write_plan(_sng_plan(nodes=[4], ranks_per_node=[4]), tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "n4-r4-t12.json").write_text('{"schema": "gan3d-ru')
    [status] = sweep_jobs.collect(tmp_path)
    assert (status.state, status.result, status.done) == ("NOT SUBMITTED", None, False)
    assert status.problem.startswith(
        f"{tmp_path}/results/n4-r4-t12.json:1: not valid JSON"
    )  # named, one line
    assert sweep_jobs.submit(tmp_path, dry_run=True)[0].note == "dry run: would sbatch"
    with pytest.raises(
        KitError, match=r"n4-r4-t12.json:1: not valid JSON"
    ):  # a report never silently lacks it
        sweep_jobs.results(tmp_path)


def test_waiting_on_a_plan_with_runs_never_submitted_returns_at_once(tmp_path):
    write_plan(_sng_plan(nodes=[4], ranks_per_node=[4]), tmp_path)
    [status] = sweep_jobs.wait(
        tmp_path, poll_seconds=60, timeout=1
    )  # would raise after 1 s if it waited
    assert status.state == "NOT SUBMITTED" and not status.active


# -- kit scale plan --calibrate: the sweep kit scale predict needs ---------------------------------


def test_calibration_counts_and_short_epochs():
    from kit.scale.plan import calibration_nodes, calibration_train_args

    assert calibration_nodes(1, 768) == [1, 2, 8]
    assert calibration_nodes(4, 768) == [4, 8, 32]
    assert calibration_nodes(100, 768) == [100, 200, 400]  # 8n0 beyond the site: 4n0
    assert calibration_nodes(300, 768) == [300, 600]  # neither fits: two counts (predict warns)
    with pytest.raises(KitError, match="needs 400 and 800 nodes, the site allows 1..768"):
        calibration_nodes(400, 768)
    assert calibration_train_args(("--data", "/x")) == (
        ("--data", "/x", "--epochs", "2", "--steps-per-epoch", "20"),
        ["--epochs 2", "--steps-per-epoch 20"],
    )
    assert (
        calibration_train_args(("--epochs=3", "--steps-per-epoch", "5"))[1] == []
    )  # the user's own stay
    for one in (("--epochs", "1"), ("--epochs=1",)):
        with pytest.raises(KitError, match="--epochs 1: that epoch traces the step"):
            calibration_train_args(one)


def test_cli_calibrate_plans_n0_2n0_8n0_three_times_and_says_the_cost(tmp_path, capsys):
    sweep = tmp_path / "cal"
    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                "supermuc-ng",
                "--calibrate",
                "--nodes",
                "4",
                "--ranks-per-node",
                "4",
                "--no-container",
                "--walltime",
                "00:30:00",
                "--dir",
                str(sweep),
                "--",
                "--data",
                "/x",
            ]
        )
        == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    plan = load_plan(sweep)
    assert [r.run_id for r in plan.runs] == [
        f"n{n}-r4-t12-x{i}" for n in (4, 8, 32) for i in (1, 2, 3)
    ]
    assert plan.train_args == ("--data", "/x", "--epochs", "2", "--steps-per-epoch", "20")
    # (4 + 8 + 32) nodes x 3 repeats x 0.5 h
    assert "4, 8, 32 node(s) x 3 repeats" in out and "at most 66 node-hours" in out
    assert f"then kit scale predict {sweep}" in out
    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                "supermuc-ng",
                "--calibrate",
                "--nodes",
                "4,8",
                "--no-container",
                "--dir",
                str(tmp_path / "x"),
            ]
        )
        == 1
    )
    assert "give the smallest count n0 alone" in capsys.readouterr().err
    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                "supermuc-ng",
                "--no-container",
                "--dir",
                str(tmp_path / "y"),
            ]
        )
        == 1
    )
    assert "--nodes is required (or --calibrate)" in capsys.readouterr().err
