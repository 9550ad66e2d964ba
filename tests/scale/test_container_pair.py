"""A real container/bare pair on this machine: the same tiny 1-rank training bare and inside ch-run
(the MPICH test image, the venv and the checkout bound in, as tests/slurm does for its container
job), then `kit scale report --reference table8` over the two real results files. Nothing is mocked;
the numbers are whatever this machine measured, so only their relations are asserted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.cli import main
from kit.scale import load_results
from tests.support.parts import require

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TRAIN = [
    "-m",
    "gan3d",
    "train",
    "--data",
    "/data/a.h5,/data/b.h5",
    "--validation-data",
    "/data/c.h5",
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
    "--threads",
    "1",
    "--seed",
    "3",
    "--results",
]


@pytest.fixture(scope="module")
def image(mpich_oci) -> Path:
    """The MPICH test image with mount points for the Python the venv points at, the venv, and the
    checkout.
    """
    require(
        shutil.which("ch-run") is not None, "ch-run not installed (Debian package charliecloud)"
    )
    base = Path(sys.base_prefix).resolve()
    require(
        base not in (Path("/usr"), Path("/usr/local")), "venv on the system Python: cannot bind it"
    )
    from tests.support.images import converted_dir

    return converted_dir(
        mpich_oci, sorted({str(base), str(REPO), str(Path(sys.prefix).resolve()), "/data"})
    )


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    return {k: v for k, v in env.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_", "CH_"))}


def test_container_and_bare_runs_are_two_series_and_one_overhead_row(image, tmp_path, capsys):
    from gan3d.simulate import write_files

    data = tmp_path / "data"
    for src, name in zip(write_files(data, 3, 32, seed=5), ("a.h5", "b.h5", "c.h5")):
        src.rename(data / name)
    base, venv = Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()
    binds = [f"--bind={p}:{p}" for p in sorted({base, REPO, venv})] + [f"--bind={data}:/data"]
    python = str(Path(sys.executable).absolute())
    inside = subprocess.run(
        [
            "ch-run",
            *binds,
            f"--set-env=PYTHONPATH={REPO}",
            str(image),
            "--",
            python,
            *TRAIN,
            "/data/container.json",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert inside.returncode == 0, inside.stderr[-3000:]
    bare_args = [a.replace("/data/", f"{data}/") for a in TRAIN] + [str(data / "bare.json")]
    bare = subprocess.run(
        [python, *bare_args], env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert bare.returncode == 0, bare.stderr[-3000:]

    records = {
        name: json.loads((data / f"{name}.json").read_text()) for name in ("container", "bare")
    }
    assert (
        records["container"]["container"] == "charliecloud" and records["bare"]["container"] is None
    )
    for r in records.values():  # the new fields, as the trainer measured them
        assert len(r["epoch_wall_times"]) == len(r["epoch_times"]) == 2
        assert all(
            w >= t > 0 for w, t in zip(r["epoch_wall_times"], r["epoch_times"])
        )  # wall adds the all-reduces
        assert (
            0 < r["memory_available_bytes_min_per_rank"][0]
            and r["peak_rss_bytes_per_rank"][0] > 50 * 2**20
        )
        assert r["train_events"] == 64 and r["preset"] == "tiny"

    runs = load_results([data / "container.json", data / "bare.json"])
    assert runs[0].series.layout == runs[1].series and runs[0].series != runs[1].series
    out = tmp_path / "report"
    assert (
        main(
            [
                "scale",
                "report",
                "--results",
                str(data / "container.json"),
                str(data / "bare.json"),
                "--out",
                str(out),
                "--reference",
                "table8",
            ]
        )
        == 0
    )
    md = (out / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| `no-site/1x1/b4/"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    inside_s, bare_s = (runs[i].epoch_seconds for i in (0, 1))
    assert cells[1] == "charliecloud" and cells[2] == "1"
    assert cells[5].startswith(f"{100 * (inside_s - bare_s) / bare_s:+.1f}%")
    assert "| AlexNet with cifar10 | 1968 | 1973 | +0.25% |" in md
    assert (out / "container_overhead.png").read_bytes().startswith(b"\x89PNG")
