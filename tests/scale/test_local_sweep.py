"""A sweep on a site without a batch system (`laptop`, scheduler.type local): kit scale submit runs
its runs here, one after another under MPICH's mpiexec, and collect, cancel and a second submit
read what it recorded.

The fast tests launch a stand-in for Python (a shell script given as the plan's --python) through
the real mpiexec: what is under test is the kit's runner (ledger, states, logs, bounds, Ctrl-C),
and the stand-in fails, hangs or succeeds on request. The laptop tutorial's test
(tests/gan3d_train/test_tutorial_laptop.py) runs the same cycle with real trainings.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from kit.scale.plan import make_plan, write_plan
from tests.support.parts import require

SITE = "laptop"


@pytest.fixture(autouse=True)
def _mpiexec():
    require(
        shutil.which("mpiexec.hydra") or shutil.which("mpiexec.mpich"),
        "MPICH mpiexec (apt-get install mpich)",
    )


def _stand_in(control: Path) -> Path:
    """A `python` that takes gan3d train's arguments: exits 3 if CONTROL/fail-THREADS exists, sleeps
    (its pid in CONTROL/pid-THREADS-RANK) if CONTROL/sleep-THREADS does, else rank 0 writes an ok
    results file."""
    script = control / "python"
    script.write_text(
        f"""#!/bin/sh
results=""; threads=""; prev=""
for a in "$@"; do
  [ "$prev" = --results ] && results=$a
  [ "$prev" = --threads ] && threads=$a
  prev=$a
done
rank=${{PMI_RANK:-0}}
echo "rank $rank: $*"
if [ -e {control}/fail-$threads ]; then
  echo "gan3d train: error: unrecognized arguments: --bad" >&2; exit 3
fi
if [ -e {control}/sleep-$threads ]; then
  echo $$ > {control}/pid-$threads-$rank; exec sleep 120
fi
[ "$rank" = 0 ] && printf '{{"status": "ok"}}' > "$results"
exit 0
"""
    )
    script.chmod(0o755)
    return script


def _plan(tmp_path: Path, walltime: str = "00:05:00") -> tuple[Path, Path]:
    """Two runs, 1 rank x 2 threads and 2 ranks x 1 thread, launched with the stand-in."""
    control = tmp_path / "control"
    control.mkdir()
    sweep = tmp_path / "sweep"
    plan = make_plan(
        SITE,
        [1],
        [1, 2],
        threads=None,
        walltime=walltime,
        python=str(_stand_in(control)),
        train_args=("--preset", "tiny"),
    )
    write_plan(plan, sweep)
    return sweep, control


def _ledger(sweep: Path) -> dict:
    return yaml.safe_load((sweep / "jobs.yaml").read_text())


def _collect(sweep: Path, capsys) -> tuple[int, dict]:
    rc = main(["scale", "collect", str(sweep), "--json"])
    return rc, {r["run"]: r for r in json.loads(capsys.readouterr().out)["runs"]}


def test_a_failed_run_is_recorded_with_its_log_the_next_runs_and_a_resubmit_skips_done_runs(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "250")
    sweep, control = _plan(tmp_path)
    (control / "fail-2").touch()  # n1-r1-t2 fails, n1-r2-t1 still runs after it
    assert main(["scale", "submit", str(sweep)]) == 1
    out = capsys.readouterr().out
    assert "FAILED (exit 3)" in out and "COMPLETED" in out and "next: kit scale collect" in out
    ledger = _ledger(sweep)
    [failed], [done] = ledger["n1-r1-t2"], ledger["n1-r2-t1"]
    assert (failed["state"], failed["exit"], done["state"], done["exit"]) == (
        "FAILED",
        3,
        "COMPLETED",
        0,
    )
    assert failed["job"].startswith("local-") and failed["job"] != done["job"]
    # the run's command line, as its batch job would have it: the run's threads, the site, results
    log = (sweep / "logs" / f"n1-r2-t1-{done['job']}.out").read_text()
    assert log.count("rank ") == 2 and "--threads 1 --ranks 2 --results" in log
    assert f"--results {sweep.absolute()}/results/n1-r2-t1.json --preset tiny" in log

    rc, runs = _collect(sweep, capsys)
    assert rc == 1
    assert runs["n1-r1-t2"]["state"] == "FAILED (exit 3)" and runs["n1-r1-t2"]["result"] is None
    assert "unrecognized arguments: --bad" in runs["n1-r1-t2"]["problem"]
    assert runs["n1-r2-t1"]["state"] == "COMPLETED" and runs["n1-r2-t1"]["result"]
    began = time.monotonic()
    assert main(["scale", "collect", str(sweep), "--wait", "--poll", "30"]) == 1  # nothing queued
    assert time.monotonic() - began < 20
    assert "its log ends:" in capsys.readouterr().out

    (control / "fail-2").unlink()
    assert main(["scale", "submit", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "has a result" in out and len(_ledger(sweep)["n1-r2-t1"]) == 1
    assert [e["state"] for e in _ledger(sweep)["n1-r1-t2"]] == ["FAILED", "COMPLETED"]
    rc, runs = _collect(sweep, capsys)
    assert rc == 0 and all(r["result"] and r["state"] == "COMPLETED" for r in runs.values())

    assert main(["scale", "cancel", str(sweep)]) == 0
    assert "nothing is queued" in capsys.readouterr().out


def test_a_dry_run_prints_the_command_lines_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    sweep, control = _plan(tmp_path)
    assert main(["scale", "submit", str(sweep), "--dry-run"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "dry run:" in line]
    assert len(lines) == 2 and all(
        "mpiexec" in line and " -m gan3d train " in line for line in lines
    )
    assert " -n 1 " in lines[0] and "--threads 2 --ranks 1 " in lines[0]
    assert " -n 2 " in lines[1] and "--threads 1 --ranks 2 " in lines[1]
    assert not (sweep / "jobs.yaml").exists() and not (sweep / "logs").exists()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _pids(control: Path, threads: int, ranks: int, timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    files = [control / f"pid-{threads}-{r}" for r in range(ranks)]
    while not all(f.exists() and f.read_text().strip() for f in files):
        assert time.monotonic() < deadline, "the stand-in never started"
        time.sleep(0.2)
    return [int(f.read_text()) for f in files]


def _wait_gone(pids: list[int], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return all(_gone(p) for p in pids)


def test_a_run_past_its_walltime_is_stopped_with_its_ranks(tmp_path, capsys):
    sweep, control = _plan(tmp_path, walltime="00:00:03")
    (control / "sleep-1").touch()  # n1-r2-t1 hangs
    began = time.monotonic()
    assert main(["scale", "submit", str(sweep), "--only", "n1-r2-t1"]) == 1
    assert time.monotonic() - began < 60
    assert "TIMEOUT after" in capsys.readouterr().out
    assert _wait_gone(_pids(control, 1, 2))
    rc, runs = _collect(sweep, capsys)
    assert rc == 1 and runs["n1-r2-t1"]["state"] == "TIMEOUT"
    assert runs["n1-r1-t2"]["state"] == "NOT SUBMITTED"


def test_ctrl_c_stops_the_running_training_and_keeps_the_finished_runs(tmp_path, capsys):
    sweep, control = _plan(tmp_path)
    (control / "sleep-1").touch()  # the second run, n1-r2-t1, hangs until stopped
    kit = subprocess.Popen(
        [sys.executable, "-m", "kit", "scale", "submit", str(sweep)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        pids = _pids(control, 1, 2)
        kit.send_signal(signal.SIGINT)
        out, _ = kit.communicate(timeout=60)
    finally:
        if kit.poll() is None:
            kit.kill()
    assert kit.returncode == 130, out
    assert _wait_gone(pids)
    ledger = _ledger(sweep)
    assert ledger["n1-r1-t2"][-1]["state"] == "COMPLETED"
    assert ledger["n1-r2-t1"][-1]["state"] == "CANCELLED"
    assert (sweep / "results" / "n1-r1-t2.json").exists()
    (control / "sleep-1").unlink()
    assert main(["scale", "submit", str(sweep)]) == 0
    assert "has a result" in capsys.readouterr().out
    assert len(_ledger(sweep)["n1-r1-t2"]) == 1 and len(_ledger(sweep)["n1-r2-t1"]) == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--nodes", "1,2", "--no-container"], "--nodes 2: site laptop has no scheduler"),
        (["--nodes", "1", "--image", "img.sqfs"], "--image: site laptop has no scheduler"),
        (["--nodes", "1", "--no-container", "--validate"], "--validate: site laptop has no"),
    ],
)
def test_what_a_local_site_cannot_run_is_refused_in_one_line(extra, message, tmp_path, capsys):
    argv = ["scale", "plan", "--site", SITE, *extra, "--dir", str(tmp_path / "s")]
    assert main([*argv, "--", "--data", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert message in err and "scheduler.type local" in err and "fix: " in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


def test_a_local_jobs_end_the_kit_did_not_write_is_refused_in_one_line(tmp_path, capsys):
    sweep, _ = _plan(tmp_path)
    entry = {"job": "local-12", "submitted": "x", "state": "DONE", "exit": 0}
    (sweep / "jobs.yaml").write_text(yaml.safe_dump({"n1-r1-t2": [entry]}))
    assert main(["scale", "collect", str(sweep)]) == 1
    err = capsys.readouterr().err
    assert "jobs.yaml" in err and "DONE" in err and len(err.strip().splitlines()) == 1
