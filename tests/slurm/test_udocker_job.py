"""A tiny 2-rank gan3d train submitted with `kit slurm submit` to this machine's one-node Slurm, each
rank in `udocker run` (Debian's proot through the kit's wrapper) on the MPICH test image with the
host's MPICH bound in, the venv's Python and this checkout bound in as tests/support/sites.py's
paired_container_site does. Slurm runs the job as root here, so the site allows udocker root."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from kit.mpi import convert_paired
from kit.slurm.jobs import is_active, job_states
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.sites import slurm_site_dict, write_site
from tests.support.training import tiny_train_args

pytestmark = pytest.mark.slow
WAIT = 900  # seconds: TensorFlow starting under proot, then 2 epochs of 3 steps


def test_two_ranks_train_through_udocker_under_slurm(
    slurm, mpich_system_oci, showers, tmp_path, monkeypatch, capsys
):
    require(Path("/usr/bin/proot").is_file(), "Debian's proot (apt-get install proot)")
    udocker = shutil.which("udocker") or shutil.which(
        "udocker", path=str(Path(sys.executable).parent)
    )
    require(udocker is not None, "udocker (pip install '.[udocker]')")
    base, venv = Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()
    require(
        base not in (Path("/usr"), Path("/usr/local")), "venv on the system Python: cannot bind it"
    )
    work = tmp_path / "work"
    work.mkdir()
    doc = slurm_site_dict("localslurm-udocker")
    doc["container"] = {
        "runtime": "udocker",
        "image_dir": str(tmp_path / "images"),
        "binds": [f"{p}:{p}" for p in sorted({str(REPO), str(base), str(venv), str(work)})],
        "udocker": {"executable": udocker, "dir": str(tmp_path / "udocker"), "allow_root": True},
    }
    site = write_site(tmp_path, doc)
    image = tmp_path / "images" / "gan3d"
    assert not convert_paired(mpich_system_oci, image, site).pair.missing
    pair = yaml.safe_load((tmp_path / "images" / "gan3d.pair.yaml").read_text())
    pair["site_image"] = str(image)  # here, not where `kit transfer push --install` would put it
    (tmp_path / "images" / "gan3d.pair.yaml").write_text(yaml.safe_dump(pair, sort_keys=False))
    data = [Path(shutil.copy(f, work / f.name)) for f in showers]
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # sbatch passes it on, udocker --hostenv too
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KIT_CACHE", raising=False)  # it would move the cache past XDG
    run_dir = work / "run"
    assert (
        main(
            [
                "slurm",
                "submit",
                "--site",
                str(site),
                "--image",
                str(image),
                "--nodes",
                "1",
                "--ranks-per-node",
                "2",
                "--threads",
                "1",
                "--dir",
                str(run_dir),
                "--python",
                sys.executable,
                "--run-id",
                "ud",
                "-q",
                "--",
                *tiny_train_args(data),
            ]
        )
        == 0
    )
    job = capsys.readouterr().out.split()[-1]
    script = (run_dir / "scripts" / "ud.sbatch").read_text()
    assert (
        " udocker --allow-root run --nobanner --pull=never --hostenv --location="
        in script.replace(udocker, "udocker")
    )
    deadline = time.monotonic() + WAIT
    while is_active(state := job_states([job])[job]) and time.monotonic() < deadline:
        time.sleep(3)
    log = run_dir / "logs" / f"ud-{job}.out"
    text = log.read_text() if log.exists() else ""
    assert state == "COMPLETED", f"{state}: {text[-3000:]}"
    record = json.loads((run_dir / "results" / "ud.json").read_text())
    assert record["container"] == "udocker" and record["ranks"] == 2
    assert record["mpi_library_version"].startswith("MPICH Version:")
