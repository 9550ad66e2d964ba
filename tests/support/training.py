"""Real but tiny trainings (`python -m gan3d train`, tiny preset): their arguments, and the
trainer run in this checkout, alone or under MPICH's mpiexec."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.paths import REPO


def tiny_train_args(files: list[Path]) -> tuple[str, ...]:
    """Two epochs of three steps of the tiny preset: a real training run in seconds."""
    return (
        "--data",
        f"{files[0]},{files[1]}",
        "--validation-data",
        str(files[2]),
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--steps-per-epoch",
        "3",
        "--validation-steps",
        "2",
        "--seed",
        "3",
    )


MPIEXEC = shutil.which("mpiexec.hydra") or shutil.which("mpiexec.mpich")


def horovod_with_mpi() -> bool:
    probe = "import horovod.tensorflow as h, sys; sys.exit(0 if h.mpi_built() else 1)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def train_env() -> dict:
    # TMPDIR: the run's own (tests/conftest.py): what a stopped or aborted rank leaves goes with the run
    env = dict(
        os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO), TMPDIR=tempfile.gettempdir()
    )
    for key in [k for k in env if k.startswith(("SLURM_", "OMPI_", "PMI_"))]:
        del env[key]
    return env


def train(
    args: list[str],
    ranks: int | None = None,
    timeout: int = 240,
    python_flags: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *python_flags, "-m", "gan3d", "train", *args]
    if ranks is not None:
        cmd = [MPIEXEC, "-n", str(ranks), *cmd]
    return subprocess.run(
        cmd, cwd=REPO, env=train_env(), capture_output=True, text=True, timeout=timeout
    )


def tiny_run_args(data, results: Path, *extra: str) -> list[str]:
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
        "3",
        "--validation-steps",
        "2",
        "--threads",
        "1",
        "--seed",
        "11",
        "--results",
        str(results),
        *extra,
    ]
