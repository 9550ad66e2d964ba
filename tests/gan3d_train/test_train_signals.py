"""SIGTERM (Slurm's time limit, scancel) and Ctrl-C reaching `gan3d train` in the middle of a
checkpoint save: the run ends with one line and 143/130, the checkpoint directory holds only
complete checkpoints (the half-written one removed, not left for a later run), no process of the
run outlives it, and --resume continues from the last complete epoch."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.interrupts import tagged
from tests.support.paths import REPO
from tests.support.training import MPIEXEC, tiny_run_args, train_env

LIMIT = 300  # seconds: a bound only a hung run reaches
STATUS = {"SIGINT": 130, "SIGTERM": 143}
WORDS = {"SIGINT": "interrupted", "SIGTERM": "terminated (SIGTERM)"}


def _signalled(
    args: list[str], sig: str, ranks: int | None, fired: Path
) -> tuple[subprocess.CompletedProcess, str]:
    """Train, signalled by rank 0 itself as it writes epoch 2's checkpoint metadata (state and
    generator weights are in the temporary tree by then)."""
    tag = f"KIT_TEST_RUN_{uuid.uuid4().hex}"
    cmd = [sys.executable, "-m", "tests.support.signal_at", "gan3d", "train", *args]
    if ranks is not None:
        cmd = [MPIEXEC, "-n", str(ranks), *cmd]
    env = dict(
        train_env(),
        **{
            tag: "1",
            "KIT_TEST_SIGNAL_AT": f"tempfile.mkstemp|epoch-0002.tmp-|1|{sig}",
            "KIT_TEST_SIGNAL_FIRED": str(fired),
        },
    )
    return subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=LIMIT
    ), tag


@pytest.mark.parametrize("ranks,sig", [(None, "SIGTERM"), (None, "SIGINT"), (2, "SIGTERM")])
def test_a_stop_during_a_checkpoint_save_leaves_complete_checkpoints_and_resumes(
    parts, data, tmp_path, ranks, sig
):
    ckpt = tmp_path / "ckpt"
    run, tag = _signalled(
        tiny_run_args(data, tmp_path / "r.json", "--epochs", "2", "--checkpoint-dir", str(ckpt)),
        sig,
        ranks,
        tmp_path / "fired",
    )
    assert (tmp_path / "fired").exists(), run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("gan3d train")]
    if ranks is None:
        assert run.returncode == STATUS[sig], run.stderr[-3000:]
        assert lines == [f"gan3d train: {WORDS[sig]}"], run.stderr[-3000:]
    else:  # the job ends (no rank left waiting in a collective), failed, saying why
        assert run.returncode != 0 and lines == [f"gan3d train: [rank 0] {WORDS[sig]}"], run.stderr[
            -3000:
        ]
    deadline = time.monotonic() + LIMIT
    while left := tagged(tag):
        assert time.monotonic() < deadline, f"processes of the run still alive: {left}"
        time.sleep(0.1)
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch-0001"]
    assert not (tmp_path / "r.json").exists()

    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "gan3d",
            "train",
            *tiny_run_args(
                data,
                tmp_path / "r.json",
                "--epochs",
                "2",
                "--checkpoint-dir",
                str(ckpt),
                "--resume",
            ),
        ],
        cwd=REPO,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((tmp_path / "r.json").read_text())["start_epoch"] == 1
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch-0001", "epoch-0002"]
