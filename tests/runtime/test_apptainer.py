"""kit.runtime.apptainer: the launch line under every launcher the kit supports (golden, then
parsed back by a real shell), what the site config refuses, and the image environment of an
image file read back with the real unsquashfs. (A real Apptainer runs a line in
tests/image/test_sif_apptainer.py.)"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kit.errors import KitError
from kit.image import sif
from kit.mpi.launch import Launch
from kit.runtime import runtime_of
from kit.runtime.apptainer import env_words, file_environment
from kit.site import load_site
from tests.support.paths import REPO
from tests.support.sites import slurm_site_dict, write_site

BINDS = [("/usr/lib/x86_64-linux-gnu", "/opt/hostmpi/lib0"), ("/scratch/my data", "/data")]
IMAGE_ENV = {"PATH": "/opt/py/bin:/usr/bin", "LD_LIBRARY_PATH": "/opt/app/lib"}
RANK = (
    "apptainer exec --bind=/usr/lib/x86_64-linux-gnu:/opt/hostmpi/lib0 "
    "'--bind=/scratch/my data:/data' --env=PATH=/opt/py/bin:/usr/bin "
    "--env=LD_LIBRARY_PATH=/opt/hostmpi/compat:/opt/app/lib "
    "--env=UCX_MODULE_DIR=/opt/hostmpi/lib0/ucx '--env=MSG=a b;c /opt/py/bin:/usr/bin' "
    "~/images/gan3d.current python3 -m gan3d train"
)
GOLDEN = {
    "hydra": f"/usr/bin/mpiexec -n ${{NRANKS}} {RANK}",
    "pmi2": f"srun --mpi=pmi2 {RANK}",
    "pmix": f"srun --mpi=pmix {RANK}",
    "openmpi": "/opt/openmpi/4.1.5/bin/mpirun -n ${NRANKS} --map-by "
    "ppr:${RANKS_PER_NODE}:node:PE=${OMP_NUM_THREADS} --bind-to core -x OMP_NUM_THREADS "
    f"-x TF_CPP_MIN_LOG_LEVEL -x KIT_RUN_ID {RANK}",
}


def _doc(launcher: str) -> dict:
    if launcher == "hydra":
        doc = yaml.safe_load((REPO / "site-configs" / "laptop.yaml").read_text())
    elif launcher == "openmpi":
        doc = yaml.safe_load((REPO / "site-configs" / "openmpi-cluster.yaml").read_text())
    else:
        doc = slurm_site_dict()
        doc["scheduler"]["mpi_plugin"] = launcher
    doc["name"] = f"app-{launcher}"
    doc["container"]["runtime"] = "apptainer"
    return doc


def _launch(site, environment: dict[str, str] | None = IMAGE_ENV) -> Launch:
    return Launch(
        site,
        BINDS,
        {"UCX_MODULE_DIR": "/opt/hostmpi/lib0/ucx", "MSG": "a b;c $PATH"},
        {"LD_LIBRARY_PATH": ["/opt/hostmpi/compat"]},
        True,
        environment,
    )


@pytest.mark.parametrize("launcher", sorted(GOLDEN))
def test_the_launch_line_under_each_launcher(launcher, tmp_path):
    """The pair's binds, and every value a rank needs as --env (the image's environment first,
    the pair's directories in front of its LD_LIBRARY_PATH): the host's never reaches it."""
    site = load_site(write_site(tmp_path, _doc(launcher)))
    line = _launch(site).line("~/images/gan3d.current")
    assert line == GOLDEN[launcher]
    words = subprocess.run(
        ["bash", "-c", f"HOME=/h; printf '%s\\n' {line}"], capture_output=True, text=True
    ).stdout.splitlines()
    start = words.index("apptainer")
    assert words[start : start + 4] == [
        "apptainer",
        "exec",
        "--bind=/usr/lib/x86_64-linux-gnu:/opt/hostmpi/lib0",
        "--bind=/scratch/my data:/data",
    ]
    assert "--env=MSG=a b;c /opt/py/bin:/usr/bin" in words and "/h/images/gan3d.current" in words
    assert not {"--cleanenv", "--containall", "--contain", "-e", "-c", "-C"} & set(words)


def test_singularity_options_and_userns(tmp_path):
    """runtime singularity is this runtime, run as `singularity`; the site's options and
    --userns come right after exec; run_args is the same line as argv, ending at the image."""
    doc = _doc("hydra")
    doc["container"]["runtime"] = "singularity"
    doc["container"]["apptainer"] = {"options": ["--sharens"], "userns": True}
    site = load_site(write_site(tmp_path, doc))
    assert runtime_of(site).name == "apptainer"
    argv = _launch(site).run_args("/x/img.sif")
    assert argv[:5] == [
        "singularity",
        "exec",
        "--userns",
        "--sharens",
        "--bind=/usr/lib/x86_64-linux-gnu:/opt/hostmpi/lib0",
    ]
    assert (
        argv[-1] == "/x/img.sif"
        and "--env=LD_LIBRARY_PATH=/opt/hostmpi/compat:/opt/app/lib" in argv
    )


@pytest.mark.parametrize("option", ["--cleanenv", "-C", "--contain", "--containall", "--compat"])
def test_options_that_break_an_mpi_run_are_refused(option, tmp_path):
    doc = _doc("hydra")
    doc["container"]["apptainer"] = {"options": ["--sharens", option]}
    with pytest.raises(KitError) as err:
        load_site(write_site(tmp_path, doc))
    line = str(err.value)
    assert "\n" not in line and "container.apptainer.options" in line and option in line
    assert "one-rank job" in line and "fix: remove it" in line


def test_apptainer_settings_need_runtime_apptainer(tmp_path):
    doc = _doc("hydra")
    doc["container"]["runtime"] = "charliecloud"
    doc["container"]["apptainer"] = {"userns": True}
    with pytest.raises(KitError, match=r"apptainer settings for runtime charliecloud.*fix: "):
        load_site(write_site(tmp_path, doc))


@pytest.mark.parametrize("value", ['say "hi"', "a=1,b=2"])
def test_a_value_apptainer_would_split_is_refused(value):
    with pytest.raises(KitError, match=r"the value of K, .* apptainer exec --env would split"):
        env_words({"K": value})
    assert env_words({"K": "a=1;b 2", "L": "x,y"}) == ["--env=K=a=1;b 2", "--env=L=x,y"]


def _squash(tree: Path, out: Path) -> Path:
    subprocess.run(
        ["mksquashfs", str(tree), str(out), "-quiet", "-noappend", "-no-progress"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out


def test_the_environment_of_an_image_file_is_read_from_it(tmp_path):
    """SquashFS and SIF images: ch/environment read with the real unsquashfs (at the SIF's
    partition), and put on the line; an image without one gives nothing."""
    if shutil.which("mksquashfs") is None:
        pytest.skip("squashfs-tools not installed (scripts/setup.sh)")
    tree = tmp_path / "tree"
    (tree / "ch").mkdir(parents=True)
    (tree / "ch" / "environment").write_text('PATH=/opt/py/bin:/bin\nPYTHONPATH="/opt/app"\n')
    squash = _squash(tree, tmp_path / "img.sqfs")
    image = tmp_path / "img.sif"
    with open(image, "wb") as out:
        sif.write(
            out,
            squash,
            hashlib.sha256(squash.read_bytes()).hexdigest(),
            definition=b"Bootstrap: scratch\n",
            labels=b"{}",
            arch=sif.arch_code("amd64"),
            mtime=1,
        )
    want = {"PATH": "/opt/py/bin:/bin", "PYTHONPATH": "/opt/app"}
    assert file_environment(str(squash)) == file_environment(str(image)) == want
    site = load_site(write_site(tmp_path, _doc("hydra")))
    words = _launch(site, None).run_args(str(image))
    assert "--env=PYTHONPATH=/opt/app" in words and "--env=MSG=a b;c /opt/py/bin:/bin" in words
    (tree / "ch" / "environment").unlink()
    assert file_environment(str(_squash(tree, tmp_path / "bare.sqfs"))) == {}
