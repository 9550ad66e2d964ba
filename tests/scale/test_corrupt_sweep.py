"""`kit scale collect|submit|report` on a damaged sweep dir: every damage ends in one line naming the
file, the line and the key, and exit 1 -- never a traceback, a hang, or a run silently left out."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from kit.errors import KitError
from kit.scale import sweep_jobs
from kit.scale.plan import make_plan, write_plan
from tests.support.parts import require

RUN = "n4-r4-t12"


@pytest.fixture
def sweep(tmp_path) -> Path:
    write_plan(make_plan("supermuc-ng", [4], [4], threads=None, walltime="02:00:00"), tmp_path)
    return tmp_path


def one_line_error(capsys, argv: list[str], *words: str) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kit: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    for word in words:
        assert word in err, err
    return err


def edit_plan(sweep: Path, change) -> None:
    plan = yaml.safe_load((sweep / "plan.yaml").read_text())
    change(plan)
    (sweep / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    "change, key, expected",
    [
        (
            lambda p: p["runs"][0].update(nodes="four"),
            "nodes: four",
            "runs[0].nodes: expected an integer, got str 'four'",
        ),
        (
            lambda p: p["runs"][0].update(partition=["a", "b"]),
            "partition:",
            "runs[0].partition: expected a string or null, got list ['a', 'b']",
        ),
        (
            lambda p: p["runs"][0].pop("run_id"),
            "nodes: 4",
            "runs[0].run_id: missing required key (a string)",
        ),
        (
            lambda p: p.update(runs={"a": 1}),
            "runs:",
            "runs: expected a list of mappings",
        ),
        (
            lambda p: p["runs"][0].update(run_id="../../../outside"),
            "run_id:",
            "runs[0].run_id: '../../../outside' is not a run id",
        ),  # its results, log and scripts would be files outside DIR
        (
            lambda p: p["runs"][0].update(run_id="a\nb"),
            "run_id:",
            "runs[0].run_id: 'a\\nb' contains a control character",
        ),
        (
            lambda p: p["runs"][0].update(threads_per_rnak=2),
            "threads_per_rnak:",
            "runs[0].threads_per_rnak: unknown key; did you mean 'threads_per_rank'?",
        ),  # a plan edited by hand: the key meant is named, not passed over
        (
            lambda p: p.update(train_args="--epochs 2"),
            "train_args:",
            "train_args: expected a list of strings",
        ),
    ],
)
def test_a_malformed_plan_names_line_and_key(sweep, capsys, change, key, expected):
    edit_plan(sweep, change)
    line = line_of(sweep / "plan.yaml", key)
    for argv in (["scale", "collect", str(sweep)], ["scale", "submit", str(sweep), "--dry-run"]):
        one_line_error(capsys, argv, f"{sweep}/plan.yaml:{line}: {expected}", "fix: ")


def test_a_ledger_with_several_bad_entries_names_each_in_one_line(sweep, capsys):
    path = sweep / "jobs.yaml"
    path.write_text(yaml.safe_dump({RUN: [{"job": "1;x"}], "n8-r4-t12": [{"job": True}]}))
    err = one_line_error(capsys, ["scale", "collect", str(sweep)], "(2 problem(s))")
    assert f"{path}:{line_of(path, '1;x')}: {RUN}[0].job: '1;x' is not a Slurm job id" in err
    assert f"{path}:{line_of(path, 'true')}: n8-r4-t12[0].job: True is not a Slurm job id" in err


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "kit_plan: 1\ntrain_args: " + "[" * 10_000 + "]" * 10_000 + "\n",
            "plan.yaml:2: YAML refused: nested deeper",
        ),
        (
            "kit_plan: 1\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [" + ", ".join([f"*{p}"] * 10) + "]\n"
                for p, c in zip("abcdefgh", "bcdefghi")
            ),
            "YAML refused: aliases expand",
        ),
        (
            "kit_plan: 1\nsite: !!python/object/apply:os.system [true]\n",
            "plan.yaml:2: YAML refused: tag !!python",
        ),
        ("kit_plan: 1\nsite: caf\xe9\n", "plan.yaml:2: the sweep plan is not UTF-8"),
    ],
)
def test_a_hostile_plan_is_refused_in_one_line(sweep, capsys, text, expected):
    (sweep / "plan.yaml").write_bytes(text.encode("latin-1"))
    one_line_error(capsys, ["scale", "collect", str(sweep)], expected)


@pytest.mark.timeout(30)
def test_fifos_in_place_of_plan_ledger_or_result_do_not_block(sweep, capsys):
    os.mkfifo(sweep / "results.fifo")
    (sweep / "results").mkdir()
    os.mkfifo(sweep / "results" / f"{RUN}.json")
    [status] = sweep_jobs.collect(sweep)
    assert "is a FIFO, not the regular file a gan3d results file is" in status.problem
    one_line_error(capsys, ["scale", "report", str(sweep)], f"{RUN}.json: is a FIFO")
    os.mkfifo(sweep / "jobs.yaml")
    one_line_error(capsys, ["scale", "collect", str(sweep)], f"{sweep}/jobs.yaml: is a FIFO")
    (sweep / "plan.yaml").unlink()
    os.mkfifo(sweep / "plan.yaml")
    one_line_error(capsys, ["scale", "collect", str(sweep)], f"{sweep}/plan.yaml: is a FIFO")


@pytest.mark.parametrize(
    "ledger, needle, expected",
    [
        (
            {RUN: [{"job": "1,2", "submitted": "x"}]},
            "job:",
            "not a Slurm job id",
        ),  # squeue/scancel would get two jobs
        (
            {RUN: [{"job": "12"}], "n8-r4-t12": "12"},
            "n8-r4-t12",
            "n8-r4-t12: expected a list of mappings",
        ),
        ({RUN: [{"submitted": "x"}]}, "submitted", "[0].job: missing required key"),
        ({RUN: [{"job": [[[[[1]]]]] * 20}]}, "job:", "is not a Slurm job id"),
    ],
)
def test_a_malformed_ledger_names_line_and_key(sweep, capsys, ledger, needle, expected):
    path = sweep / "jobs.yaml"
    path.write_text(yaml.safe_dump(ledger))
    err = one_line_error(
        capsys, ["scale", "collect", str(sweep)], f"{path}:{line_of(path, needle)}: ", expected
    )
    assert len(err) < 600


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text, expected",
    [
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
        ('{"schema": "gan3d-run/1", "job": [1]}', "job: expected a mapping with keys slurm_job_id"),
        (
            '{"schema": "gan3d-run/1", "job": {"slurm_job_id": 7}, "status": "done"}',
            "status: 'done' is not allowed (allowed: ok, failed)",
        ),
        ('{"schema": "gan3d-run/1",\n "nodes": 4,\n "x": }', ".json:3: not valid JSON"),
        ("[1, 2]", "the top level is an array, not the object a gan3d results file is"),
        ("3", "the top level is a number"),
        ('"x"', "the top level is a string"),
        ("null", "the top level is null"),
        ("NaN", "the top level is a number"),
    ],
)
def test_a_damaged_result_is_named_by_collect_and_stops_report(sweep, capsys, text, expected):
    (sweep / "results").mkdir()
    path = sweep / "results" / f"{RUN}.json"
    path.write_text(text)
    [status] = sweep_jobs.collect(sweep)
    assert status.result is None and "\n" not in status.problem
    assert (
        status.problem.startswith(str(path))
        and expected in status.problem
        and not status.problem_in_log
    )
    assert main(["scale", "collect", str(sweep)]) == 1
    out = capsys.readouterr().out
    assert "has no result; its result file is refused:" in out and "its log ends" not in out
    one_line_error(capsys, ["scale", "report", str(sweep)], f"{path}")


@pytest.mark.timeout(30)
def test_the_log_tail_reads_only_the_end_and_never_a_fifo(tmp_path):
    log = tmp_path / "big.out"
    with open(log, "wb") as fh:
        fh.truncate(64 * 2**20)  # 64 MiB of NULs (sparse), then the lines that matter
        fh.seek(0, os.SEEK_END)
        fh.write(b"".join(b"line %d\n" % i for i in range(20)))
    assert sweep_jobs._log_tail(log).splitlines() == [f"line {i}" for i in range(8, 20)]
    os.mkfifo(tmp_path / "fifo.out")
    assert sweep_jobs._log_tail(tmp_path / "fifo.out") == ""


def test_a_slurm_that_does_not_answer_is_one_line(sweep, capsys, monkeypatch):
    """squeue's own complaint spans lines (parse error, no controller, fatal): the kit's error stays
    one.
    """
    require(shutil.which("squeue"), "squeue not installed")
    (sweep / "slurm.conf").write_text("ClusterName=x\nBogusKey=1\n")
    monkeypatch.setenv("SLURM_CONF", str(sweep / "slurm.conf"))
    (sweep / "jobs.yaml").write_text(yaml.safe_dump({RUN: [{"job": "12", "submitted": "x"}]}))
    one_line_error(
        capsys, ["scale", "collect", str(sweep)], "kit: error: squeue failed: ", "try again"
    )


def test_a_failed_run_is_shown_by_collect_and_left_out_of_the_report_by_name(sweep, capsys):
    """gan3d train writes "status": "failed" when losses diverge: never counted, always named."""
    (sweep / "results").mkdir()
    path = sweep / "results" / f"{RUN}.json"
    path.write_text(
        '{"schema": "gan3d-run/1", "status": "failed", "error": "losses became NaN at epoch 1 step 3"}'
    )
    [status] = sweep_jobs.collect(sweep)
    assert (
        status.result is None
        and "the run failed" in status.problem
        and "NaN at epoch 1" in status.problem
    )
    assert f"--resubmit --only {RUN}" in status.problem
    failed: list[str] = []
    assert sweep_jobs.results(sweep, failed) == [] and len(failed) == 1
    assert main(["scale", "report", str(sweep)]) == 1  # nothing else to report
    err = capsys.readouterr().err
    assert "left out (failed run):" in err and "no results to report" in err
    one_line_error(capsys, ["scale", "report", "--results", str(path)], "the run failed", "fix: ")


@pytest.mark.parametrize(
    "key, value",
    [
        ("flop_per_second", 1e308),
        ("showers_per_second", 1e300),
        ("nodes", int("1" * 400)),
        ("percent_of_peak", float("1e308")),
        ("batch_per_rank", 10**13),
        ("epoch_wall_times", [5e-324, 5e-324]),
        ("epoch_step_seconds", [1e-300, 1e-300]),
    ],
)
def test_numbers_past_any_machine_in_a_results_file_are_one_line(tmp_path, capsys, key, value):
    from kit.cli import main
    from tests.scale.builders import write_run

    good = write_run(tmp_path / "a.json", 4, 100.0)
    bad = tmp_path / "b.json"
    record = json.loads(good.read_text())
    record[key] = value
    bad.write_text(json.dumps(record))
    assert (
        main(["scale", "report", "--results", str(good), str(bad), "--out", str(tmp_path / "r")])
        == 1
    )
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and re.search(rf"{re.escape(str(bad))}: {key}(\[\d+\])?: ", err)
        and not (tmp_path / "r").exists()
    )


def test_a_result_replaced_by_an_array_after_it_was_checked_is_the_runs_physics_problem(
    tmp_path, monkeypatch
):
    """collect reads a validated run's result twice (is it the run's, then its physics): a file replaced
    in between by one of another top-level type is that run's problem in one line, not a crash."""
    write_plan(
        make_plan(
            "supermuc-ng",
            [4],
            [4],
            threads=None,
            walltime="02:00:00",
            train_args=("--synthetic-dir", "s"),
            validate=True,
        ),
        tmp_path,
    )
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump({RUN: [{"job": "12", "submitted": "x"}]}))
    (tmp_path / "results").mkdir()
    path = tmp_path / "results" / f"{RUN}.json"
    path.write_text("[1, 2]")
    monkeypatch.setattr(sweep_jobs, "job_states", lambda jobs: {j: "COMPLETED" for j in jobs})
    monkeypatch.setattr(
        sweep_jobs, "run_result", lambda files, job: files.result
    )  # checked before the swap
    [status] = sweep_jobs.collect(tmp_path)
    assert status.physics == "failed" and "\n" not in status.physics_problem
    assert status.physics_problem.startswith(f"{path}: the top level is an array")
    with pytest.raises(KitError, match="the top level is an array"):
        sweep_jobs.unscored(tmp_path)
