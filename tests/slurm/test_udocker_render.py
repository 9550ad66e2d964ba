"""Batch scripts of a udocker site: each rank is `udocker run --location=IMAGE` on the directory image
with the image's environment and the pair's binds and values spelled out (udocker expands none), the
variables that keep udocker offline and on the kit's proot wrapper, and no ch-run peer group."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from kit.mpi import convert_paired
from kit.mpi.pair_reader import read_pair_file
from kit.site import load_site
from kit.slurm import RunFiles, RunSpec, check_run, render, write_run
from tests.support.hostmpi import TARGET
from tests.support.sites import slurm_site_dict, write_site
from tests.support.training import tiny_train_args


@pytest.fixture(scope="module")
def paired(mpich_system_oci, tmp_path_factory):
    """(site, pair file, work dir): the MPICH test image converted for a udocker site behind
    Slurm.
    """
    base = tmp_path_factory.mktemp("udocker")
    doc = slurm_site_dict("udslurm")
    doc["container"]["runtime"] = "udocker"
    doc["container"]["udocker"] = {"dir": "~/.udocker-kit"}
    doc["container"]["binds"] = [f"{base}/work:/work"]
    site = load_site(write_site(base, doc))
    conversion = convert_paired(mpich_system_oci, base / "images" / "gan3d", site)
    (base / "work").mkdir()
    doc = yaml.safe_load(conversion.pair_file.read_text())
    assert (
        doc["site_image"] == "~/images/gan3d.current"
    )  # where `kit transfer push --install` puts it
    doc["site_image"] = str(base / "images" / "gan3d")  # here: the converted image itself
    conversion.pair_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return site, conversion.pair_file, base


def _spec(**kw) -> RunSpec:
    return RunSpec("r", 1, 2, 1, "00:10:00", **kw)


def _last_line(script: str) -> list[str]:
    return shlex.split(script.rstrip("\n").splitlines()[-1])


def test_each_rank_is_udocker_run_on_the_image_with_everything_spelled_out(
    paired, tmp_path, monkeypatch
):
    site, pair_file, base = paired
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KIT_CACHE", raising=False)  # it would move the cache past XDG
    pair = read_pair_file(pair_file, site)
    run = check_run(
        site, _spec(train_args=tiny_train_args([base / "work" / f"f{i}.h5" for i in range(3)]))
    )
    script = render(site, run, RunFiles(base / "work" / "sweep", "r"), pair=pair)
    words = _last_line(script)
    image = str(base / "images" / "gan3d")
    assert words[:8] == [
        "srun",
        "--mpi=pmi2",
        "udocker",
        "run",
        "--nobanner",
        "--pull=never",
        "--hostenv",
        f"--location={image}",
    ]
    assert (
        f"--volume=/usr/lib/x86_64-linux-gnu:{TARGET}/lib0" in words
        and f"--volume={base}/work:/work" in words
    )
    envs = [w.split("=", 1)[1] for w in words if w.startswith("--env=")]
    image_env = (Path(image) / "ch/environment").read_text().splitlines()
    assert (
        image_env and envs[: len(image_env)] == image_env
    )  # the image's own first, as udocker skips it
    assert (
        f"LD_LIBRARY_PATH={TARGET}/compat" in envs and f"UCX_MODULE_DIR={TARGET}/lib0/ucx" in envs
    )
    assert not any("$" in e for e in envs)  # udocker expands nothing: every value is final
    dash = words.index("-")
    assert (
        words[dash + 1 : dash + 5] == ["python3", "-m", "gan3d", "train"]
        and "--" not in words[:dash]
    )
    assert "ch-run" not in script and "KIT_JOIN_TAG" not in script
    exports = [line for line in script.splitlines() if line.startswith("export UDOCKER_")]
    wrapper = tmp_path / "cache" / "secure-site-kit" / "udocker"
    assert exports[0] == "export UDOCKER_TARBALL=''"  # set and empty: nothing downloaded
    assert exports[1] == "export UDOCKER_DEFAULT_EXECUTION_MODE=P1"
    assert exports[2].startswith(f"export UDOCKER_USE_PROOT_EXECUTABLE={wrapper}/proot-no-k-")
    assert exports[3] == "export UDOCKER_DIR=\"${HOME}\"/.udocker-kit"
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    # render writes nothing; write_run writes the wrapper the script names
    assert not wrapper.exists()
    write_run(site, run, base / "work" / "sweep", pair=pair)
    named = Path(exports[2].split("=", 1)[1])
    assert named.is_file() and named.stat().st_mode & 0o777 == 0o755


def test_an_image_under_home_is_the_jobs_home(paired, tmp_path, monkeypatch):
    """site_image ~/images/gan3d: the location word expands in the job's shell; the environment is
    read from that path here."""
    site, pair_file, base = paired
    monkeypatch.setenv("HOME", str(base))
    doc = yaml.safe_load(pair_file.read_text())
    doc["site_image"] = "~/images/gan3d"
    moved = tmp_path / "home.pair.yaml"
    moved.write_text(yaml.safe_dump(doc, sort_keys=False))
    script = render(
        site,
        check_run(site, _spec()),
        RunFiles(base / "work" / "s2", "r"),
        pair=read_pair_file(moved, site),
    )
    line = script.rstrip("\n").splitlines()[-1]
    assert " \"--location=${HOME}\"/images/gan3d " in line
    words = subprocess.run(
        ["bash", "-c", f"HOME=/h; printf '%s\\n' {line.split(' udocker ', 1)[1]}"],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert words[4] == "--location=/h/images/gan3d" and any(
        w.startswith("--env=PATH=") for w in words
    )


def test_the_pair_file_shows_the_udocker_launch(paired):
    site, pair_file, base = paired
    launch = yaml.safe_load(pair_file.read_text())["launch"]
    print(launch)
    assert launch.startswith(
        "srun --mpi=pmi2 udocker run --nobanner --pull=never --hostenv "
        "\"--location=${HOME}\"/images/gan3d.current --volume="
    )
