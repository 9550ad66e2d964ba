"""gan3d train refuses a rank whose MPI world is not the job its launcher started: a runtime that
keeps the launcher's PMI variables from the ranks (Apptainer --cleanenv, udocker without --hostenv,
runc losing Hydra's PMI fd) leaves each rank a 1-rank job that trains alone and ends with status 0.
Real MPICH: a rank started without its PMI connection initialises as a singleton while its
launcher's count stays (PMI_SIZE), or, its environment wiped, only --ranks says how many."""

import subprocess
import sys

import pytest

from gan3d import runtime
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.training import MPIEXEC, tiny_run_args, train_env


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from gan3d.simulate import write_files

    return write_files(tmp_path_factory.mktemp("showers"), 3, 32, seed=3)


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error" in line.lower()]


def test_a_singleton_rank_of_a_two_rank_launch_is_refused_in_one_line(data, tmp_path):
    """MPI_Init without the launcher's connection (no PMI_FD): a world of 1, while PMI_SIZE says
    2.
    """
    require(_mpi4py(), "mpi4py (scripts/setup.sh)")
    done = subprocess.run(
        [sys.executable, "-m", "gan3d", "train", *tiny_run_args(data, tmp_path / "r.json")],
        cwd=REPO,
        env=dict(train_env(), PMI_SIZE="2", PMI_RANK="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = _errors(done.stderr)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        "gan3d train: error: MPI world of 1 rank(s), but the launcher started 2 (PMI_SIZE)"
    )
    assert "--hostenv" in lines[0] and "fix:" in lines[0]
    assert not (tmp_path / "r.json").exists()


@pytest.mark.system
def test_ranks_whose_environment_is_wiped_are_refused_by_the_ranks_on_their_line(data, tmp_path):
    """Two ranks under MPICH's mpiexec, each started by `env -i` (what Apptainer's --cleanenv
    does: no PMI variable, no size variable left): only the --ranks the kit writes on every line
    tells them they are not the job; both stop with the one line, nothing is written."""
    require(MPIEXEC is not None and _mpi4py(), "MPICH mpiexec and mpi4py (scripts/setup.sh)")
    kept = {k: v for k, v in train_env().items() if k in ("PATH", "HOME", "PYTHONPATH", "TMPDIR")}
    cmd = [
        MPIEXEC,
        "-n",
        "2",
        "env",
        "-i",
        *(f"{k}={v}" for k, v in kept.items()),
        sys.executable,
        "-m",
        "gan3d",
        "train",
        "--ranks",
        "2",
        *tiny_run_args(data, tmp_path / "r.json"),
    ]
    done = subprocess.run(
        cmd, cwd=REPO, env=train_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    lines = _errors(done.stderr)
    assert len(lines) == 2 and all(
        "MPI world of 1 rank(s), but the launcher started 2 (--ranks)" in ln for ln in lines
    ), done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("key", runtime.WORLD_SIZE_ENV)
def test_each_launchers_count_is_compared(key):
    runtime.check_world_size(3, {key: "3"})
    with pytest.raises(
        runtime.SettingsError,
        match=f"MPI world of 1 rank\\(s\\), but the launcher started 3 \\({key}\\)",
    ):
        runtime.check_world_size(1, {key: "3"})


def test_the_launcher_of_this_process_speaks_first_and_a_batch_scripts_count_not_at_all():
    """mpiexec in a batch script: PMI_SIZE is the launch's, SLURM_NTASKS the whole job's (a
    physics step of one rank runs in a job of many)."""
    runtime.check_world_size(1, {"PMI_SIZE": "1", "SLURM_STEP_NUM_TASKS": "8"})
    runtime.check_world_size(1, {"SLURM_NTASKS": "8"})
    runtime.check_world_size(2, {})


def test_the_ranks_on_the_command_line_win_over_any_variable():
    """--ranks survives a runtime that cleans the environment; a variable never overrules it."""
    runtime.check_world_size(2, {"PMI_SIZE": "1"}, started=2)
    with pytest.raises(runtime.SettingsError, match=r"started 2 \(--ranks\)"):
        runtime.check_world_size(1, {"PMI_SIZE": "1"}, started=2)


def _mpi4py() -> bool:
    return (
        subprocess.run([sys.executable, "-c", "import mpi4py.MPI"], capture_output=True).returncode
        == 0
    )
