"""docs/tutorial/laptop.md, run as a reader runs it (tests/support/tutorial.py): every command of
the page, in one shell, in a fresh home directory, with the output the page shows. Minutes of
TensorFlow (the demo, a tune of two layouts, a sweep of four runs on this machine): `make test`'s,
not `make check`'s."""

import json
import sys
from pathlib import Path

import pytest

from kit.scale import tune
from kit.site import load_site
from tests.support.paths import REPO
from tests.support.training import train_env
from tests.support.tune import check_tune
from tests.support.tutorial import run_page

PAGE = REPO / "docs" / "tutorial" / "laptop.md"


@pytest.mark.timeout(2400)
def test_the_laptop_tutorial_runs_as_written(parts, tmp_path):
    env = dict(
        train_env(),
        PATH=f"{Path(sys.executable).parent}:{train_env()['PATH']}",  # as `. .venv/bin/activate`
        HOME=str(tmp_path),
        COLUMNS="120",  # rich folds table cells to the terminal's width: one fixed for the page
    )
    env.pop("TF_CPP_MIN_LOG_LEVEL")  # the page sets it
    run_page(PAGE, tmp_path, env, timeout=2100)
    work = tmp_path / "kit-tutorial"
    # what the page tells the reader to look at, beyond what the commands print
    assert sorted(p.name for p in (work / "build" / "demo" / "plots").glob("*.png"))
    assert (work / "build" / "demo" / "learning" / "learning.png").stat().st_size > 0
    # the tune the page runs: a row per layout from its own run, the fastest recommended, and the
    # recommendation is what `kit scale plan --layout best` takes
    best = check_tune(work / "tune", "laptop", [(1, 2), (2, 1)])["best"]
    assert tune.load_best(work / "tune" / tune.TUNE_NAME, load_site("laptop")) == (
        best["ranks_per_node"],
        best["threads_per_rank"],
    )
    shown = ("time_per_epoch.png", "showers_per_second.png", "loss_overlay.png", "report.md")
    assert all((work / "sweep" / "report" / name).stat().st_size > 0 for name in shown)
    runs = sorted((work / "sweep" / "results").glob("n1-*.json"))
    assert [r.stem for r in runs] == ["n1-r1-t2-x1", "n1-r1-t2-x2", "n1-r2-t1-x1", "n1-r2-t1-x2"]
    for run in runs:
        record = json.loads(run.read_text())
        assert record["status"] == "ok" and record["showers_per_second"] > 0, run
    report = (work / "sweep" / "report" / "report.md").read_text()
    assert "1 ranks/node × 2 threads/rank" in report and "2 ranks/node × 1 threads/rank" in report
