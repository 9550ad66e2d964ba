"""A udocker site on the two virtual nodes, run by an ordinary user (`nobody`; udocker refuses root):
`kit mpi check` puts one rank on each node through `srun --mpi=pmi2 … udocker run`, and a 1-epoch
tiny `gan3d train` sweep of 2 ranks on 2 nodes goes through `kit scale plan|submit|collect`.

The host MPI is the cluster's Intel MPI runtime (its vcluster.yaml), copied where that user may read
it; the image is the MPICH test image as a directory, paired for this site; the ranks run the
image's Python 3.11 with this checkout and the venv's TensorFlow and Horovod on PYTHONPATH (bound
in; udocker --hostenv passes the job's environment on; sbatch passes it to the job). Everything
the user reads or writes is in a directory of its own, searchable by all."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.support.hostmpi import TARGET
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.udocker import USER, write_shim

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]
PYTHON = f"/usr/bin/python3.{sys.version_info.minor}"  # the user's (the venv's base is root's)
WAIT = 2400  # seconds: TensorFlow starting under proot on 2 nodes that share 2 loaded cores


def _site_packages() -> str:
    return str(Path(sysconfig.get_paths()["purelib"]).resolve())


@pytest.fixture(scope="module")
def public(vcluster, impi_prefix):
    """A directory the user may enter and read (home/ is its own), with a copy of the Intel MPI
    runtime: the cached one is under root's home."""
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) to run as nobody")
    require(Path("/usr/bin/proot").is_file(), "Debian's proot (apt-get install proot)")
    require(Path(PYTHON).is_file(), f"{PYTHON} (the user's Python; the venv's base is root's)")
    pytest.importorskip("udocker", reason="udocker (pip install '.[udocker]')")
    base = Path(tempfile.mkdtemp(prefix="kit-vc-udocker-", dir="/tmp"))
    base.chmod(0o755)
    for sub in ("home", "work"):
        (base / sub).mkdir()
        shutil.chown(base / sub, "nobody")
    # The image's Python has no distutils (Debian's python3-setuptools is not in the test image),
    # which Horovod imports: setuptools' own copy from the venv, as that package provides it.
    (base / "pylib").mkdir()
    (base / "pylib" / "distutils").symlink_to(Path(_site_packages()) / "setuptools" / "_distutils")
    shutil.copytree(impi_prefix, base / "impi", symlinks=True)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def udocker_site(vcluster, impi_prefix, public) -> Path:
    """The cluster's srun site (Intel MPI over libfabric tcp on vc0) with udocker as its runtime."""
    text = (Path(vcluster.directory) / "vcluster.yaml").read_text()
    doc = yaml.safe_load(text.replace(str(impi_prefix), str(public / "impi")))
    doc["name"] = f"{doc['name']}-udocker"
    shim = write_shim(public / "udocker", PYTHON, _site_packages())
    doc["container"] = {
        "runtime": "udocker",
        "image_dir": str(public / "images"),
        "binds": [f"{p}:{p}" for p in (REPO, _site_packages(), public)],
        "mpi_target": TARGET,
        "udocker": {"executable": str(shim), "dir": str(public / "home" / ".udocker")},
    }
    path = public / "vcluster-udocker.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o644)
    return path


@pytest.fixture(scope="module")
def udocker_image(udocker_site, mpich_oci, public) -> Path:
    """The MPICH test image as a directory paired for the site, with the .current link batch jobs
    run (what `kit transfer push --install` leaves)."""
    from kit.mpi import convert_paired

    images = public / "images"
    images.mkdir()
    done = convert_paired(mpich_oci, images / "gan3d", udocker_site)
    assert not done.pair.missing, done.pair.missing
    (images / "gan3d.current").symlink_to("gan3d")
    return images / "gan3d"


def _kit(public: Path, vcluster, *argv: str, timeout: float) -> subprocess.CompletedProcess:
    """`python -m kit ARGV` as nobody, talking to the virtual cluster."""
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": f"{REPO}:{_site_packages()}:{public / 'pylib'}",
        "HOME": str(public / "home"),
        "SLURM_CONF": str(vcluster.conf),
        "COLUMNS": "1000",
        "LANG": "C.UTF-8",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    return subprocess.run(
        [*USER, PYTHON, "-m", "kit", *argv],
        cwd=public / "work",
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_kit_mpi_check_puts_a_udocker_rank_on_each_node(
    vcluster, public, udocker_site, udocker_image
):
    done = _kit(
        public,
        vcluster,
        *("mpi", "check", "--site", str(udocker_site), str(udocker_image)),
        *("--nodes", "2", "--timeout", "900"),
        timeout=1200,
    )
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert "allreduce across 2 nodes is right" in out, out[-3000:]
    assert "MPI library (inside udocker)" in out and "libmpi.so.12" in out, out[-3000:]
    for node in vcluster.nodes:
        assert node["name"] in out, out[-3000:]
    assert not (public / "work" / ".mountpoints").exists()  # the check's own directory, removed


def test_a_two_node_sweep_trains_through_udocker(
    vcluster, public, udocker_site, udocker_image, tmp_path
):
    sweep = public / "work" / "sweep"
    data = public / "work" / "data"
    from gan3d.simulate import write_files

    files = write_files(data, 3, 32, seed=5)
    for f in [data, *files]:
        shutil.chown(f, "nobody")
    train = (
        *("--data", f"{files[0]},{files[1]}", "--validation-data", str(files[2])),
        *("--preset", "tiny", "--batch-size", "4", "--epochs", "1"),
        *("--steps-per-epoch", "2", "--validation-steps", "1", "--seed", "3"),
    )
    plan = _kit(
        public,
        vcluster,
        *("scale", "plan", "--site", str(udocker_site), "--image", str(udocker_image)),
        *("--nodes", "2", "--ranks-per-node", "1", "--python", PYTHON),
        *("--walltime", "00:40:00", "--dir", str(sweep), "--", *train),
        timeout=300,
    )
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    submit = _kit(public, vcluster, "scale", "submit", str(sweep), timeout=300)
    assert submit.returncode == 0, submit.stdout[-2000:] + submit.stderr[-2000:]
    collect = _kit(
        public,
        vcluster,
        *("scale", "collect", str(sweep), "--wait", "--poll", "5"),
        *("--timeout", str(WAIT), "--json"),
        timeout=WAIT + 300,
    )
    doc = json.loads(collect.stdout)
    shutil.copytree(sweep / "logs", tmp_path / "logs")  # kept after the run for a look
    logs = "".join(p.read_text()[-3000:] for p in (sweep / "logs").glob("*.out"))
    assert collect.returncode == 0 and doc["problems"] == 0, (
        [r["problem"] for r in doc["runs"]],
        logs,
    )
    (run,) = doc["runs"]
    launch = (sweep / "scripts" / f"{run['run']}.sbatch").read_text().splitlines()[-1]
    assert launch.startswith("srun --mpi=pmi2 ") and " run --nobanner --pull=never --hostenv " in (
        launch
    ), launch
    result = json.loads(Path(run["result"]).read_text())
    per_node = collections.Counter(result["hostname_per_rank"])
    assert sorted(per_node) == sorted(n["name"] for n in vcluster.nodes), per_node
    assert set(per_node.values()) == {1} and result["ranks"] == 2
    assert result["container"] == "udocker"
    assert result["mpi_library_version"].startswith("Intel(R) MPI Library")
    weights = result["weights_sha256_per_rank"]
    assert len(weights) == 2 and len(set(weights)) == 1  # Horovod kept both ranks in step
    assert weights[0] != result["weights_sha256_initial"]  # and they trained
