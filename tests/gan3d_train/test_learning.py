"""The demo's learning part (gan3d.learning): which checkpoints it scores, the minutes it shows for
them, what a failed validation shows, and its plot. `gan3d validate` is a stand-in script here;
the tutorial's test (docs/tutorial/laptop.md) runs the part for real."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

from rich.console import Console

from gan3d.learning import EPOCH_STEPS, EXIT_TERMINATED, Point, chosen, measure, plot, table, train

PNG = b"\x89PNG\r\n\x1a\n"
# answers as `gan3d validate` does (its JSON on stdout), by the checkpoint it was given
FAKE_VALIDATE = """#!/bin/sh
case "$5" in
  *epoch-0003/*) echo '{"score": -0.5}' ;;
  *epoch-0006/*) echo '{"score": 0.25}' ;;
  *epoch-0009/*) echo 'no such weights' >&2; exit 3 ;;
  *) echo '{"score": 0.5, "plots": []}' ;;
esac
"""


def test_four_checkpoints_spread_to_the_last_are_scored():
    assert chosen(list(range(1, 13))) == [3, 6, 9, 12]
    assert chosen([1, 2, 3, 4, 5]) == [2, 3, 4, 5]  # the last one always
    assert chosen([2, 4]) == [2, 4]


def test_each_point_has_its_steps_minutes_and_score_or_why_not(tmp_path):
    python = tmp_path / "python"
    python.write_text(FAKE_VALIDATE)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    started = 1_000_000.0
    for epoch in range(1, 13):  # complete checkpoints, one written every minute
        path = tmp_path / "ckpt" / f"epoch-{epoch:04d}"
        path.mkdir(parents=True)
        (path / "meta.json").write_text("{}")
        os.utime(path, (started + 60 * epoch, started + 60 * epoch))
    (tmp_path / "ckpt" / ".epoch-0013.tmp-1.0").mkdir()  # a half-written one is not scored
    points = measure(
        str(python),
        tmp_path / "ckpt",
        heldout=tmp_path / "held.h5",
        out=tmp_path / "out",
        started=started,
    )
    assert [(p.steps, round(p.minutes, 3), p.score) for p in points] == [
        (3 * EPOCH_STEPS, 3.0, -0.5),
        (6 * EPOCH_STEPS, 6.0, 0.25),
        (9 * EPOCH_STEPS, 9.0, None),
        (12 * EPOCH_STEPS, 12.0, 0.5),
    ]
    assert points[2].why == "gan3d validate exit 3: no such weights"
    console = Console(width=200, record=True)
    console.print(table(points, planned=12 * EPOCH_STEPS))
    shown = console.export_text()
    assert "none: gan3d validate exit 3: no such weights" in shown and "stopped" not in shown
    console.print(table(points[:2], planned=12 * EPOCH_STEPS))  # the time bound ended it early
    assert f"stopped by the time bound before step {12 * EPOCH_STEPS}" in console.export_text()


def test_the_plot_is_a_png_and_none_without_a_score(tmp_path):
    assert plot([Point(50, 1.0, None, "no score")], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
    path = plot([Point(50, 1.0, -2.0), Point(100, 2.0, 0.3)], tmp_path / "curve.png")
    assert path == tmp_path / "curve.png" and Path(path).read_bytes().startswith(PNG)


def test_the_time_bound_stops_the_training_and_the_part_goes_on():
    begun = time.time()
    code, started = train([sys.executable, "-c", "import time; time.sleep(120)"], minutes=0.02)
    assert code == EXIT_TERMINATED and begun <= started and time.time() - begun < 30
