"""Real studies on the `laptop` site: every evaluation is a real Horovod training of the tiny preset
under the site's MPI launcher (2 steps of 4 showers), 2 in flight. Nothing is mocked.

- a 4-point grid in which one setting makes gan3d's training diverge (a setting `kit study plan` can
  refuse, such as a batch the data cannot serve, never gets that far): those evaluations fail with
  their log tail, the others finish, the report names the best config computed here from the
  results files;
- a 6-evaluation mbo study whose driver is SIGKILLed mid-way: the evaluations it started keep
  running, a second driver is refused while the first runs, the next one re-attaches and the study
  ends with exactly 6 evaluations, none run twice.
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

from kit.cli import main
from kit.errors import KitError
from kit.study import evalproc, ledger
from kit.study.run import run_study
from tests.support.parts import require
from tests.support.studies import PNG_MAGIC, in_flight_over_time, study_yaml

WAIT = 900  # seconds for a whole study on two shared, loaded cores


def _mpich() -> bool:
    import shutil

    return bool(shutil.which("mpiexec.hydra") or shutil.which("mpiexec.mpich"))


def _results_objective(path: Path) -> float:
    return json.loads(path.read_text())["losses"][-1]["validation"]["g_loss"]


@pytest.mark.slow
def test_grid_of_4_with_a_bad_setting_two_in_flight_and_its_report(showers, tmp_path, capsys):
    require(_mpich(), "MPICH mpiexec (apt-get install mpich)")
    spec = study_yaml(
        tmp_path,
        showers,
        strategy="grid",
        evaluations=4,
        parameters={
            "optimizer": {"type": "choice", "values": ["rmsprop", "adam"]},
            "lr": {"type": "choice", "values": [0.001, 1e15]},
        },
    )  # 1e15 (the largest a study file takes): the losses are NaN after one step
    d = tmp_path / "study"
    assert (
        main(["study", "plan", str(spec), "--dir", str(d), "--site", "laptop", "--parallel", "2"])
        == 0
    )
    assert main(["study", "run", str(d), "--poll", "0.5"]) == 0
    led = ledger.read(d)
    assert len(led.evaluations) == 4 and len(led.done()) == 4
    configs = sorted((e.config["optimizer"], e.config["lr"]) for e in led.evaluations.values())
    assert configs == sorted((o, lr) for o in ("rmsprop", "adam") for lr in (0.001, 1e15))
    failed = [e for e in led.evaluations.values() if e.state == "failed"]
    assert {e.config["lr"] for e in failed} == {1e15} and len(failed) == 2
    assert all(
        "losses became NaN" in e.error and "exited 1" in e.error for e in failed
    )  # the log's tail is kept
    assert max(in_flight_over_time(d)) == 2  # two at once, never more
    finished = [e for e in led.evaluations.values() if e.state == "finished"]
    for e in finished:  # each evaluation ran its own config, and its value is its results file's
        record = json.loads(Path(e.result).read_text())
        assert (
            record["optimizer"] == e.config["optimizer"]
            and record["learning_rate"]["per_rank"] == e.config["lr"]
        )
        assert e.objective == _results_objective(Path(e.result))
    best = min(finished, key=lambda e: _results_objective(Path(e.result)))
    assert main(["study", "report", str(d)]) == 0
    report = d / "report"
    md = (report / "report.md").read_text()
    first = next(line for line in md.splitlines() if line.startswith("| 1 |"))
    assert best.eval_id in first and f"optimizer={best.config['optimizer']}" in first
    assert "## Failed evaluations" in md and all(e.eval_id in md for e in failed)
    rows = (report / "report.csv").read_text().splitlines()
    assert len(rows) == 5 and rows[0].startswith("order,eval,state,objective,running_best")
    for name in ("objective.png", "space.png"):
        assert (report / name).read_bytes()[:8] == PNG_MAGIC
    capsys.readouterr()
    assert main(["study", "status", str(d), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (
        doc["schema"] == "kit-study-status/1"
        and doc["best"]["eval"] == best.eval_id
        and doc["failed"] == 2
    )


@pytest.mark.slow
def test_mbo_study_driver_killed_midway_resumes_to_exactly_6_none_run_twice(showers, tmp_path):
    require(_mpich(), "MPICH mpiexec (apt-get install mpich)")
    spec = study_yaml(
        tmp_path,
        showers,
        strategy="mbo",
        evaluations=6,
        parameters={
            "lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "flip-prob": {"type": "float", "low": 0.0, "high": 0.2},
        },
    )
    d = tmp_path / "study"
    assert (
        main(["study", "plan", str(spec), "--dir", str(d), "--site", "laptop", "--parallel", "2"])
        == 0
    )
    driver = subprocess.Popen(
        [sys.executable, "-m", "kit", "study", "run", str(d), "--poll", "0.5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:  # mid-way: some finished, two running
        time.sleep(0.5)
        led = ledger.read(d)
        if (
            len(led.done()) >= 2
            and len(led.in_flight()) == 2
            and all(evalproc.is_running(d / "evals" / e.eval_id) for e in led.in_flight())
        ):
            break
    else:
        driver.kill()
        pytest.fail(f"the study did not get half way: {driver.stderr.read()}")
    with pytest.raises(KitError, match="another kit study run drives this study"):
        run_study(d)  # a second driver on the same DIR is refused while the first lives
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    running = [e.eval_id for e in ledger.read(d).in_flight()]
    assert running and all(
        evalproc.is_running(d / "evals" / e) for e in running
    )  # they outlive the driver
    final = run_study(d, poll_seconds=0.5)
    led = ledger.read(d)
    assert final.done == 6 and len(led.evaluations) == 6 and not led.in_flight()
    assert sorted(led.evaluations) == [f"e{i:04d}" for i in range(1, 7)]
    for e in led.evaluations.values():  # each evaluation's training started exactly once
        log = (d / "evals" / e.eval_id / evalproc.LOG).read_text()
        assert log.count(" step 0: ") == 1, e.eval_id
        assert e.state == "finished", e.error
    for eid in running:  # the re-attached ones were collected, not run again
        assert len(led.evaluations[eid].submissions) == 2 and led.evaluations[eid].submissions[
            1
        ].get("attached")
    configs = [json.dumps(e.config, sort_keys=True) for e in led.evaluations.values()]
    assert len(set(configs)) == 6  # nothing proposed twice across the two drivers
    assert main(["study", "report", str(d)]) == 0
    assert (d / "report" / "surrogate.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_physics_objective_validates_each_evaluation_and_wall_time_stops_new_proposals(
    showers, tmp_path
):
    """physics_score: each evaluation trains with a checkpoint, then `gan3d validate` scores it and the
    objective is that score. A wall-time budget already spent when the first evaluations end
    (seconds, against evaluations of tens of seconds) lets no second batch start."""
    require(_mpich(), "MPICH mpiexec (apt-get install mpich)")
    spec = study_yaml(
        tmp_path,
        showers,
        strategy="random",
        evaluations=10,
        objective="physics_score",
        direction="maximize",
        parameters={"lr": {"type": "float", "low": 1e-4, "high": 1e-2}},
    )
    spec.write_text(spec.read_text().replace("  evaluations: 10", "  wall_time: 3s"))
    d = tmp_path / "study"
    assert (
        main(["study", "plan", str(spec), "--dir", str(d), "--site", "laptop", "--parallel", "2"])
        == 0
    )
    assert main(["study", "run", str(d), "--poll", "0.5"]) == 0
    led = ledger.read(d)
    assert len(led.evaluations) == 2 and all(
        e.state == "finished" for e in led.evaluations.values()
    ), [e.error for e in led.evaluations.values()]
    for e in led.evaluations.values():
        record = json.loads(Path(e.result).read_text())
        assert e.objective == record["physics"]["score"] and record["physics"]["plots"]
        assert Path(record["physics"]["generator_weights"]).is_relative_to(
            d / "evals" / e.eval_id / "checkpoints"
        )
        assert all(Path(p).is_file() for p in record["physics"]["plots"])
