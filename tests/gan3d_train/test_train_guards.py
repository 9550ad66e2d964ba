"""`python -m gan3d train` (one rank, tiny preset) on bad data, diverging losses and damaged checkpoints.

Real processes, real HDF5 files from the simulator, real checkpoints written by an earlier run.
Expected failures end with exit 1 and one `gan3d train: error:` line; nothing lost silently.
"""

import json
import math
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.training import train


def _strict(path: Path) -> dict:
    """The JSON of `path`, refusing NaN/Infinity (which json.dumps writes by default)."""

    def refuse(name):
        raise AssertionError(f"{path} holds {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


def _error_line(proc) -> str:
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[
        -3000:
    ]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("gan3d train: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def _args(data: list[Path], *extra: str) -> list[str]:
    return [
        "--data",
        f"{data[0]},{data[1]}",
        "--validation-data",
        str(data[2]),
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--steps-per-epoch",
        "2",
        "--validation-steps",
        "1",
        "--threads",
        "1",
        "--seed",
        "2",
        *extra,
    ]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> list[Path]:
    """Three simulator files; the first event of the first holds a NaN cell."""
    from gan3d.simulate import write_files

    paths = write_files(tmp_path_factory.mktemp("showers"), 3, 32, seed=4)
    with h5py.File(paths[0], "r+") as h5:
        h5["ECAL"][0, 12, 12, 3] = np.nan
    return paths


@pytest.fixture(scope="module")
def first_epoch(data, tmp_path_factory):
    """One good epoch with --skip-bad-events and a checkpoint: (results, checkpoint dir)."""
    out = tmp_path_factory.mktemp("run")
    proc = train(
        _args(
            data,
            "--skip-bad-events",
            "--epochs",
            "1",
            "--checkpoint-dir",
            str(out / "ckpt"),
            "--results",
            str(out / "r.json"),
        )
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _strict(out / "r.json"), out / "ckpt", proc


def test_skipped_bad_events_are_counted_in_the_results(first_epoch):
    record, _, proc = first_epoch
    assert record["status"] == "ok" and record["skip_bad_events"] is True
    assert record["bad_events_skipped"] == {"train": 1, "validation": 0}
    assert record["train_events"] == 63
    assert "left out 1 training and 0 validation event(s)" in proc.stdout


def test_a_bad_event_without_the_option_is_refused_naming_file_and_event(data, tmp_path):
    line = _error_line(train(_args(data, "--results", str(tmp_path / "r.json")), timeout=120))
    assert f"data file {data[0]}: dataset ECAL event 0 holds NaN or Inf cells" in line
    assert "--skip-bad-events" in line
    assert not (tmp_path / "r.json").exists()


def test_nan_losses_stop_the_run_without_a_checkpoint_or_a_valid_result(
    data, first_epoch, tmp_path
):
    _, ckpt, _ = first_epoch
    shutil.copytree(ckpt, tmp_path / "ckpt")
    results = tmp_path / "r.json"
    results.write_text(
        json.dumps({"schema": "gan3d-run/1", "showers_per_second": 9.0})
    )  # a stale result
    proc = train(
        _args(
            data,
            "--skip-bad-events",
            "--epochs",
            "3",
            "--resume",
            "--lr",
            "1e30",
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
            "--results",
            str(results),
        )
    )
    line = _error_line(proc)
    assert "losses became NaN at epoch 2 step 1" in line and "lower --lr" in line
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "epoch-0001"
    ]  # no NaN state saved
    record = _strict(results)
    assert record["status"] == "failed" and record["error"] == line.removeprefix(
        "gan3d train: error: "
    )
    assert record["failed_at"] == {"epoch": 2, "step": 1}
    assert record["checkpoint"] == str(tmp_path / "ckpt" / "epoch-0001")
    assert "showers_per_second" not in record and "flop_per_second" not in record


@pytest.mark.parametrize("meta", ['{"epoch": "one", "preset": "tiny"}', '["epoch", 1]'])
def test_resume_from_a_damaged_meta_json_is_one_line(data, first_epoch, tmp_path, meta: str):
    _, ckpt, _ = first_epoch
    shutil.copytree(ckpt, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "epoch-0001" / "meta.json").write_text(meta)
    line = _error_line(
        train(
            _args(
                data,
                "--skip-bad-events",
                "--epochs",
                "2",
                "--resume",
                "--checkpoint-dir",
                str(tmp_path / "ckpt"),
            )
        )
    )
    assert str(tmp_path / "ckpt" / "epoch-0001" / "meta.json") in line and "fix: delete" in line


def test_a_fresh_run_into_another_runs_checkpoints_is_refused_before_tensorflow(
    data, first_epoch, tmp_path
):
    """Without --resume, a directory holding a run's checkpoints is refused in one line naming --resume
    and a new --checkpoint-dir, before the data are read or TensorFlow is imported; nothing in it
    changes (its epoch 1 would replace theirs, or be pruned as older than their later epochs)."""
    _, ckpt, _ = first_epoch
    shutil.copytree(ckpt, tmp_path / "ckpt")
    before = {p: p.read_bytes() for p in (tmp_path / "ckpt").rglob("*") if p.is_file()}
    proc = train(
        _args(
            data,
            "--skip-bad-events",
            "--epochs",
            "1",
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
            "--results",
            str(tmp_path / "r.json"),
        ),
        timeout=120,
        python_flags=("-X", "importtime"),
    )
    line = _error_line(proc)
    assert line == (
        f"gan3d train: error: --checkpoint-dir {tmp_path / 'ckpt'}: "
        "holds another run's checkpoints (epoch-0001); fix: continue that run with --resume, "
        "or give a new --checkpoint-dir"
    )
    imported = re.findall(r"^import time:.*\|\s+(\S+)$", proc.stderr, re.M)
    assert (
        imported and "tensorflow" not in imported and "h5py" not in imported
    )  # no data file opened
    assert {p: p.read_bytes() for p in (tmp_path / "ckpt").rglob("*") if p.is_file()} == before
    assert not (tmp_path / "r.json").exists()


def test_two_ranks_stop_together_on_nan_losses(data, tmp_path):
    """Both ranks see the NaN (gradients are all-reduced), so the job ends at once, not in a
    hang.
    """
    from tests.support.parts import require
    from tests.support.training import MPIEXEC, horovod_with_mpi

    require(MPIEXEC is not None and horovod_with_mpi(), "MPICH mpiexec and horovod built with MPI")
    results = tmp_path / "r.json"
    proc = train(
        _args(
            data,
            "--skip-bad-events",
            "--epochs",
            "2",
            "--lr",
            "1e30",
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
            "--results",
            str(results),
        ),
        ranks=2,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[
        -3000:
    ]
    assert "gan3d train: error: [rank 0] losses became NaN at epoch 1 step 1" in proc.stderr
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").iterdir())
    record = _strict(results)
    assert record["status"] == "failed" and record["ranks"] == 2 and record["checkpoint"] is None


def test_a_checkpoint_dir_that_is_a_file_fails_before_training(data, tmp_path):
    (tmp_path / "ckpt").write_text("my notes\n")
    line = _error_line(
        train(
            _args(data, "--skip-bad-events", "--checkpoint-dir", str(tmp_path / "ckpt")),
            timeout=120,
        )
    )
    assert f"--checkpoint-dir {tmp_path / 'ckpt'}: cannot be created as a directory" in line
    assert (tmp_path / "ckpt").read_text() == "my notes\n"
    assert "epoch 1/" not in line


def test_a_failed_synthetic_run_leaves_no_temporary_showers(tmp_path):
    """--synthetic without --synthetic-dir simulates into a temporary dir: gone also when the run
    fails.
    """
    import subprocess
    import sys

    from tests.support.paths import REPO
    from tests.support.training import train_env

    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gan3d",
            "train",
            "--synthetic",
            "64",
            "--preset",
            "tiny",
            "--batch-size",
            "4",
            "--epochs",
            "2",
            "--steps-per-epoch",
            "3",
            "--validation-steps",
            "1",
            "--threads",
            "1",
            "--lr",
            "1e30",
        ],
        cwd=REPO,
        env={**train_env(), "TMPDIR": str(temp)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert "losses became NaN" in _error_line(proc)
    assert not list(temp.glob("gan3d-synthetic-*"))


@pytest.mark.parametrize("ranks", [None, 2])
def test_synthetic_dir_holding_real_data_is_refused_not_overwritten(tmp_path, ranks):
    """--synthetic-dir pointed at a directory of real CLIC files (named EleEscan_i_j.h5 like the
    simulator's): rank 0 refuses before writing any, with one line; the files stay."""
    data = tmp_path / "clic"
    data.mkdir()
    with h5py.File(data / "EleEscan_1_1.h5", "w") as h5:
        h5.create_dataset("ECAL", data=np.ones((2, 25, 25, 25), np.float32))
        h5.create_dataset("target", data=np.array([[11.0, 100.0], [11.0, 200.0]]))
    before = (data / "EleEscan_1_1.h5").read_bytes()
    proc = train(
        [
            "--synthetic",
            "16",
            "--synthetic-dir",
            str(data),
            "--preset",
            "tiny",
            "--epochs",
            "1",
            "--steps-per-epoch",
            "1",
            "--threads",
            "1",
            "--oversubscribe",
        ],
        ranks=ranks,
        timeout=120,
    )
    line = _error_line(proc)
    assert (
        f"--synthetic-dir {data / 'EleEscan_1_1.h5'}: already there and not written by gan3d simulate"
        in line
    )
    assert sorted(p.name for p in data.iterdir()) == ["EleEscan_1_1.h5"]
    assert (data / "EleEscan_1_1.h5").read_bytes() == before


FLOAT_FLAGS = {  # flag: whether a value is one gan3d train can use
    "--lr": lambda v: 0 < v < math.inf,
    "--flip-prob": lambda v: 0 <= v < 0.5,
    "--xscale": lambda v: 0 < v < math.inf,
    "--warmup-epochs": lambda v: 0 <= v <= 1_000_000,
    "--measure-peak": lambda v: 0 <= v <= 600,
}


@given(
    flag=st.sampled_from(sorted(FLOAT_FLAGS)),
    value=st.one_of(st.floats(), st.sampled_from([0.0, -0.0, 0.5, 7.0, 1e308, 601.0, 1e-300])),
)
@settings(max_examples=200, deadline=None)
def test_every_number_is_checked_before_training_starts(flag, value):
    """NaN, inf, negative and out-of-range values are refused before TensorFlow starts: --warmup-epochs
    nan and --flip-prob 7 were internal errors mid-start-up, --xscale 0 trained on garbage with exit 0,
    --measure-peak inf measured forever."""
    from gan3d.train import SettingsError, _check_args, build_parser

    args = build_parser().parse_args(["--synthetic", "16", f"{flag}={value!r}"])
    if FLOAT_FLAGS[flag](value):
        _check_args(args)
    else:
        with pytest.raises(SettingsError, match=f"^{flag} "):
            _check_args(args)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--warmup-epochs", "nan"], "--warmup-epochs nan: must be 0..1000000 epochs"),
        (["--flip-prob", "7"], "--flip-prob 7.0: must be a label flip probability in [0, 0.5)"),
        (["--seed=-1"], "--seed -1: must be 0..4294967295"),
        (
            ["--loss-weights", "8,nan,0.1"],
            "--loss-weights '8,nan,0.1': each weight must be a number of 0 or more",
        ),
    ],
)
def test_a_bad_number_is_one_line_before_training(tmp_path, argv, expected):
    proc = train(
        [
            "--synthetic",
            "16",
            "--synthetic-dir",
            str(tmp_path / "syn"),
            "--preset",
            "tiny",
            "--epochs",
            "1",
            "--steps-per-epoch",
            "1",
            "--threads",
            "1",
            *argv,
        ],
        timeout=120,
    )
    assert _error_line(proc).startswith(f"gan3d train: error: {expected}; fix: ")
    assert not (tmp_path / "syn").exists()
