"""Provenance, step times and the heartbeat of `python -m gan3d train`, from real tiny runs
(1 rank, and 2 Horovod ranks under MPICH's mpiexec); the rules behind them as properties.
Finding the commit: tests/packaging/test_code_commit.py.

Nothing is mocked in the runs. The heartbeat's clock is injected only in the property test of its
rule (a real clock cannot be steered to a chosen sequence of step times).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gan3d import results
from gan3d.heartbeat import Heartbeat
from gan3d.steplosses import StepLosses
from gan3d.steptimes import PERCENTILES, StepTimes
from kit.scale import load_results, write_report
from tests.scale.builders import write_run
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.training import MPIEXEC, horovod_with_mpi, train_env

EPOCHS, STEPS = 2, 3
BEAT = re.compile(
    r"gan3d train: heartbeat: epoch (\d+)/(\d+), step (\d+)/(\d+), ([0-9.]+) showers/s so far, "
    r"epoch ETA (\d+) s"
)
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from gan3d.simulate import write_files

    return write_files(tmp_path_factory.mktemp("showers"), 3, 64, seed=5)


def _cmd(data, results_path: Path, ranks: int | None) -> list[str]:
    import sys

    cmd = [
        sys.executable,
        "-m",
        "gan3d",
        "train",
        "--data",
        f"{data[0]},{data[1]}",
        "--validation-data",
        str(data[2]),
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--epochs",
        str(EPOCHS),
        "--steps-per-epoch",
        str(STEPS),
        "--validation-steps",
        "1",
        "--threads",
        "1",
        "--seed",
        "2",
        "--heartbeat-steps",
        "1",
        "--results",
        str(results_path),
    ]
    return cmd if ranks is None else [MPIEXEC, "-n", str(ranks), *cmd]


def _run(cmd: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        cmd, cwd=REPO, env=env or train_env(), capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def one_rank(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("one") / "r.json"
    cmd = _cmd(data, path, None)
    # KIT_IMAGE_DIGEST is what a kit batch script exports for a container launch (tests/slurm/test_render.py).
    # OMPI_MCA_btl (Open MPI's, which MPICH ignores) and Horovod's cache size (its default): recorded as set.
    proc = _run(
        cmd,
        dict(
            train_env(),
            KIT_IMAGE_DIGEST=DIGEST,
            OMPI_MCA_btl="self,vader",
            HOROVOD_CACHE_CAPACITY="1024",
        ),
    )
    return json.loads(path.read_text()), cmd, proc


@pytest.fixture(scope="module")
def two_ranks(data, tmp_path_factory):
    require(MPIEXEC is not None, "MPICH mpiexec (apt-get install mpich)")
    require(horovod_with_mpi(), "horovod built with MPI (scripts/setup.sh)")
    path = tmp_path_factory.mktemp("two") / "r.json"
    cmd = _cmd(data, path, 2)
    proc = _run(cmd)
    return json.loads(path.read_text()), cmd, proc


def _utc(text: str) -> datetime:
    stamp = datetime.fromisoformat(text)
    assert stamp.utcoffset() is not None and stamp.utcoffset().total_seconds() == 0, text
    return stamp


def _check_record(record: dict, python_cmd: list[str], ranks: int) -> None:
    assert record["schema"] == results.SCHEMA == "gan3d-run/2"
    start, end = _utc(record["started_utc"]), _utc(record["ended_utc"])
    assert start <= end <= datetime.now(timezone.utc)
    assert (end - start).total_seconds() == pytest.approx(record["wall_seconds"], abs=1.0)
    assert (
        record["command_line"] == python_cmd
    )  # each rank's process; the launcher's words are not in it
    assert record["kit_version"] == metadata.version("secure-site-kit")
    assert record["hostname_per_rank"] == [socket.gethostname()] * ranks
    steps = record["step_times"]
    assert (
        steps["count"] == EPOCHS * STEPS == record["timed_steps"] + 1
    )  # every step, the first included
    every = sum(record["epoch_step_seconds"])  # the same steps' times, summed per epoch
    assert steps["mean_seconds"] * steps["count"] == pytest.approx(every, rel=1e-9)
    ordered = [
        steps["min_seconds"],
        *(steps[f"p{p}_seconds"] for p in PERCENTILES),
        steps["max_seconds"],
    ]
    assert (
        ordered == sorted(ordered)
        and steps["min_seconds"] <= steps["mean_seconds"] <= steps["max_seconds"]
    )
    # 6 steps, 10 kept: the slowest list names every step once, slowest first, and holds min and max.
    slow = steps["slowest"]
    assert sorted((s["epoch"], s["step"]) for s in slow) == [
        (e, s) for e in (1, 2) for s in (1, 2, 3)
    ]
    seconds = [s["seconds"] for s in slow]
    assert seconds == sorted(seconds, reverse=True)
    assert (seconds[-1], seconds[0]) == (steps["min_seconds"], steps["max_seconds"])
    assert (
        next(s["seconds"] for s in slow if (s["epoch"], s["step"]) == (1, 1))
        == record["first_step_seconds"]
    )
    for p in PERCENTILES:
        assert steps[f"p{p}_seconds"] in seconds  # nearest rank: a recorded step time


def _check_step_losses(record: dict) -> None:
    """Every step logged (6 < 1024), and with one rank an epoch's train loss is the mean of its
    steps'.
    """
    logged = record["step_losses"]
    assert logged["stride"] == 1 and logged["columns"] == [
        "global_step",
        "epoch",
        "step",
        "d_loss",
        "g_loss",
    ]
    assert [row[:3] for row in logged["points"]] == [
        [(e - 1) * STEPS + s - 1, e, s] for e in (1, 2) for s in (1, 2, 3)
    ]
    for epoch in record["losses"]:
        rows = [r for r in logged["points"] if r[1] == epoch["epoch"]]
        for column, name in ((3, "d_loss"), (4, "g_loss")):
            assert sum(r[column] for r in rows) / len(rows) == pytest.approx(
                epoch["train"][name], rel=1e-5
            )


def _check_heartbeats(stdout: str) -> None:
    beats = [m.groups() for m in BEAT.finditer(stdout)]
    assert [(int(e), int(s)) for e, _, s, _ in (b[:4] for b in beats)] == [
        (e, s) for e in (1, 2) for s in (1, 2, 3)
    ]  # --heartbeat-steps 1: every step once (rank 0 only)
    assert all(int(b[1]) == EPOCHS and int(b[3]) == STEPS and float(b[4]) > 0 for b in beats)
    assert all(
        int(b[5]) == 0 for b in beats if int(b[2]) == STEPS
    )  # the epoch's last step: nothing left


def test_one_rank_records_provenance_and_step_times(one_rank):
    record, cmd, proc = one_rank
    _check_record(record, cmd, ranks=1)
    assert record["image_digest"] == DIGEST
    fabric, horovod = record["mpi_fabric"], record["horovod_settings"]
    assert set(fabric) == set(results.FABRIC_VARIABLES) and set(horovod) == set(
        results.HOROVOD_VARIABLES
    )
    assert fabric["OMPI_MCA_btl"] == "self,vader" and horovod["HOROVOD_CACHE_CAPACITY"] == "1024"
    assert horovod["HOROVOD_FUSION_THRESHOLD"] is None  # unset: Horovod's default
    _check_step_losses(record)
    _check_heartbeats(proc.stdout)


def test_one_rank_names_this_checkout_commit(one_rank):
    record, _, _ = one_rank
    git = shutil.which("git")
    require(git is not None, "git (apt-get install git)")
    head = subprocess.run(
        [git, "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    require(head.returncode == 0, f"{REPO} to be a git checkout")
    assert record["git_commit"] == head.stdout.strip()
    assert record["git_commit_basis"].startswith(f"git checkout at {REPO}")


def test_two_ranks_record_both_hosts_and_rank_0_beats_alone(two_ranks):
    record, cmd, proc = two_ranks
    _check_record(record, cmd[3:], ranks=2)
    assert record["image_digest"] is None  # a bare run: no digest exported
    _check_heartbeats(proc.stdout)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 3000), keep=st.integers(2, 64))
def test_logged_step_losses_stay_bounded_and_evenly_strided(n, keep):
    """Whatever the run length: at most `keep` rows, exactly the steps that are multiples of a
    power-of-two stride, and no larger stride than the bound needs."""
    logged = StepLosses(keep)
    for g in range(n):
        logged.add(g, g // 7 + 1, g % 7 + 1, losses={"d_loss": g * 0.5, "g_loss": -g, "other": 1.0})
    rows = logged.record()["points"]
    stride = logged.stride
    assert stride & (stride - 1) == 0 and len(rows) <= keep
    assert [r[0] for r in rows] == list(range(0, n, stride))
    assert all(r[3:] == [r[0] * 0.5, -r[0]] for r in rows)
    assert stride == 1 or len(range(0, n, stride // 2)) > keep


@given(
    st.lists(st.floats(1e-6, 1e3, allow_nan=False), min_size=1, max_size=300), st.integers(1, 12)
)
def test_step_summary_properties(durations, keep):
    times = StepTimes(slowest=keep)
    where = [(1 + i // 7, 1 + i % 7) for i in range(len(durations))]
    for t, (e, s) in zip(durations, where):
        times.add(t, e, s)
    out, n = times.summary(), len(durations)
    assert out["count"] == n and (out["min_seconds"], out["max_seconds"]) == (
        min(durations),
        max(durations),
    )
    assert out["mean_seconds"] == pytest.approx(sum(durations) / n)
    for p in (
        PERCENTILES
    ):  # nearest rank: the smallest value with at least p% of the values at or below it
        v = out[f"p{p}_seconds"]
        assert sum(d <= v for d in durations) * 100 >= p * n > sum(d < v for d in durations) * 100
    slow = out["slowest"]
    assert len(slow) == min(keep, n)
    assert [s["seconds"] for s in slow] == sorted(durations, reverse=True)[: len(slow)]
    assert all(durations[where.index((s["epoch"], s["step"]))] == s["seconds"] for s in slow)
    assert times.first == durations[0] and times.steps == n - 1


@given(
    st.lists(st.floats(0.001, 100.0), min_size=1, max_size=60),
    st.one_of(st.none(), st.integers(1, 10)),
    st.one_of(st.none(), st.floats(0.5, 200.0)),
)
def test_heartbeat_beats_after_n_steps_or_t_seconds_whichever_first(
    step_seconds, every_steps, every_seconds
):
    now = [1000.0]
    lines: list[str] = []
    beat = Heartbeat(
        lines.append,
        epochs=3,
        steps=len(step_seconds),
        showers_per_step=8,
        every_steps=every_steps,
        every_seconds=every_seconds,
        clock=lambda: now[0],
    )
    beat.start_epoch(2)
    last_step, last_time = 0, now[0]
    for done, seconds in enumerate(step_seconds, 1):
        now[0] += seconds
        expected = (every_steps is not None and done - last_step >= every_steps) or (
            every_seconds is not None and now[0] - last_time >= every_seconds
        )
        assert beat.step_done(done) == expected
        if expected:
            last_step, last_time = done, now[0]
            epoch, epochs, step, steps, rate, eta = BEAT.fullmatch(lines[-1]).groups()
            elapsed = now[0] - 1000.0
            assert (int(epoch), int(epochs), int(step), int(steps)) == (
                2,
                3,
                done,
                len(step_seconds),
            )
            assert float(rate) == pytest.approx(done * 8 / elapsed, abs=0.006)
            assert int(eta) == round((len(step_seconds) - done) * elapsed / done)


def test_a_results_file_of_the_previous_version_still_makes_a_report(tmp_path):
    """gan3d-run/1 files (before provenance and step times) load and report as before."""
    paths = [write_run(tmp_path / f"{n}.json", n, 100.0 / n) for n in (4, 8)]
    for path in paths:
        record = json.loads(path.read_text())
        record["schema"] = "gan3d-run/1"
        assert not {"step_times", "started_utc", "command_line", "git_commit"} & set(record)
        path.write_text(json.dumps(record))
    runs = load_results(paths)
    assert sorted(r.nodes for r in runs) == [4, 8]
    write_report(runs, tmp_path / "report")
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| 4 | 25.00 |" in report and "| 8 | 12.50 |" in report


def test_a_bad_heartbeat_option_is_one_line(data, tmp_path):
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gan3d",
            "train",
            "--data",
            str(data[0]),
            "--heartbeat-seconds",
            "0",
        ],
        cwd=REPO,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "gan3d train: error: --heartbeat-seconds 0: must be a number of seconds above 0"
    ]


def test_a_diverged_runs_record_names_its_start_end_command_and_commit():
    """The failure record (tests/gan3d_train/test_train_guards.py makes one for real) carries the
    same provenance as a finished run's, so a failed job is as traceable as a good one."""
    import sys

    from gan3d.runtime import RankLayout
    from gan3d.train import LossDiverged, build_parser

    args = build_parser().parse_args(["--synthetic", "64", "--preset", "tiny"])
    layout = RankLayout(0, 2, 0, 2, "h", 1, 2, "MPICH", "MPICH")
    started = results.RunClock.start()
    code = {"git_commit": "c" * 40, "git_commit_basis": "git checkout at /src"}
    record = results.failure_record(
        args,
        layout,
        LossDiverged("losses became NaN", 2, 1),
        history=[],
        checkpoints=None,
        started=started,
        code=code,
    )
    assert record["status"] == "failed" and "showers_per_second" not in record
    assert (
        _utc(record["started_utc"]) <= _utc(record["ended_utc"])
        and record["started_utc"] == started.utc
    )
    assert record["command_line"] == sys.orig_argv
    assert (record["git_commit"], record["git_commit_basis"]) == (
        code["git_commit"],
        code["git_commit_basis"],
    )


@given(st.lists(st.floats(0, 1e3), min_size=1, max_size=400), st.integers(1, 100))
@example([float(i) for i in range(100)], 7)  # floats: 7 / 100 x 100 = 7.000000000000001 -> the 8th
def test_nearest_rank_holds_for_any_whole_percent(values, percent):
    from gan3d.steptimes import nearest_rank

    v, n = nearest_rank(sorted(values), percent), len(values)
    assert sum(x <= v for x in values) * 100 >= percent * n > sum(x < v for x in values) * 100
