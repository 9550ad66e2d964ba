"""`kit scale collect --json`: the state of every run as one document, checked against the
library.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.cli import main
from kit.scale import sweep_jobs
from kit.scale.plan import make_plan, write_plan


@pytest.fixture
def sweep(tmp_path) -> Path:
    write_plan(
        make_plan("supermuc-ng", [1, 2, 4], [1, 4], threads=None, walltime="02:00:00"), tmp_path
    )
    return tmp_path


def collect_json(capsys, argv: list[str], code: int = 0) -> dict:
    assert main(argv) == code
    out, err = capsys.readouterr()
    return json.loads(out)


def test_a_planned_sweep_with_no_jobs_is_every_run_not_submitted(sweep, capsys):
    doc = collect_json(capsys, ["scale", "collect", str(sweep), "--json"])
    status = sweep_jobs.collect(sweep)
    assert doc["schema"] == "kit-scale-collect/1" and doc["dir"] == str(sweep.absolute())
    assert [r["run"] for r in doc["runs"]] == [s.run_id for s in status] and len(status) == 6
    assert all(
        r
        == {
            "run": s.run_id,
            "job": None,
            "state": "NOT SUBMITTED",
            "result": None,
            "problem": None,
            "physics": None,
            "physics_problem": None,
        }
        for r, s in zip(doc["runs"], status)
    )
    assert doc["done"] == 0 and doc["total"] == 6 and doc["problems"] == 0


def test_wait_with_json_prints_only_the_document(sweep, capsys):
    """--wait's live table would corrupt the JSON: with --json the document is the only output."""
    doc = collect_json(capsys, ["scale", "collect", str(sweep), "--wait", "--json"])
    assert doc["total"] == 6


def test_a_result_and_a_damaged_result_are_in_the_document(sweep, capsys):
    runs = [s.run_id for s in sweep_jobs.collect(sweep)]
    (sweep / "results").mkdir()
    (sweep / "results" / f"{runs[0]}.json").write_text("[1, 2]")
    doc = collect_json(capsys, ["scale", "collect", str(sweep), "--json"], code=1)
    [status] = [s for s in sweep_jobs.collect(sweep) if s.run_id == runs[0]]
    first = doc["runs"][0]
    assert (
        first["problem"] == status.problem
        and "not the object a gan3d results file is" in first["problem"]
    )
    assert doc["problems"] == 1


def test_a_sweep_dir_without_a_plan_is_one_json_error_and_nothing_on_stdout(tmp_path, capsys):
    assert main(["scale", "collect", str(tmp_path), "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert json.loads(err)["error"]["where"] == str(tmp_path / "plan.yaml")
