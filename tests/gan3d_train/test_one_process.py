"""`python -m gan3d train` where neither mpi4py nor Horovod is installed (a laptop's venv made by
`scripts/setup.sh --user` without an MPI compiler): one process trains, and a launcher's ranks are
refused. The two modules are made unimportable in the child (sys.modules[name] = None), as in a venv
without them; everything else is the real trainer."""

import json
import subprocess
import sys

import pytest

from gan3d import runtime
from gan3d.runtime import NO_MPI
from tests.support.paths import REPO
from tests.support.training import tiny_run_args, train_env

WITHOUT_MPI = (
    "import sys; sys.modules['mpi4py'] = sys.modules['horovod'] = None; "
    "from gan3d.__main__ import main; sys.exit(main(['train', *sys.argv[1:]]))"
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from gan3d.simulate import write_files

    return write_files(tmp_path_factory.mktemp("showers"), 3, 32, seed=3)


def _train(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MPI, *args],
        cwd=REPO,
        env=dict(train_env(), **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_one_process_trains_without_mpi4py_and_horovod(data, tmp_path):
    done = _train(tiny_run_args(data, tmp_path / "r.json", "--epochs", "2"))
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["ranks"] == 1 and record["mpi_library_version"] == NO_MPI
    assert record["software"]["horovod"] is None and record["software"]["mpi4py"] is None
    assert (
        record["weights_sha256_per_rank"][0] != record["weights_sha256_initial"]
    )  # it learned something
    first, last = record["losses"][0]["train"], record["losses"][-1]["train"]
    assert first["d_loss"] != last["d_loss"] and first["g_loss"] != last["g_loss"]


def test_a_launchers_second_rank_without_mpi4py_is_refused_in_one_line(data, tmp_path):
    done = _train(tiny_run_args(data, tmp_path / "r.json"), PMI_SIZE="2")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if "error" in ln]
    assert (
        len(lines) == 1 and "PMI_SIZE" in lines[0] and "mpi4py" in lines[0] and "fix:" in lines[0]
    ), done.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("key", runtime.LAUNCHER_SIZE_ENV)
def test_every_launchers_job_size_is_read_without_mpi4py(monkeypatch, key):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    assert runtime.discover_layout({key: "1"}).size == 1
    with pytest.raises(
        runtime.SettingsError, match=f"'3' ranks \\({key}\\) but mpi4py is not installed"
    ):
        runtime.discover_layout({key: "3"})
