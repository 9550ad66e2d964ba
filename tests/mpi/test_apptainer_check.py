"""`kit mpi check` through a real Apptainer (scripts/apptainer.sh; skipped naming why without
one): Hydra's mpiexec starts 2 ranks, each `apptainer exec` of the kit's MPICH test image with
this machine's Debian MPICH bound in, as a SIF, a SquashFS and a directory. And the singleton
trap: ranks whose environment Apptainer cleans are refused in one line."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.image.sif import squashfs_at
from kit.mpi import convert_paired, make_pair, run_check
from tests.support import apptainer
from tests.support.hostmpi import TARGET
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.rootfs import CACHE, _locked

pytestmark = pytest.mark.system
HOST_LIB = f"{TARGET}/lib0/libmpich.so.12.2.2"  # the host's libmpich as the ranks see it


@pytest.fixture(scope="module")
def site(mpich_host_site, tmp_path_factory) -> Path:
    """This machine's MPICH site, its ranks started by Apptainer."""
    require(os.geteuid() == 0, "a SIF or SquashFS is mounted from a loop device here: needs root")
    doc = yaml.safe_load(mpich_host_site.read_text())
    doc["name"] = "mpich-apptainer"
    doc["container"]["runtime"] = "apptainer"
    doc["container"]["apptainer"] = {"executable": str(apptainer.apptainer())}
    path = tmp_path_factory.mktemp("site") / "mpich-apptainer.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def sif(site, mpich_system_oci) -> Path:
    """`kit image convert IMAGE OUT.sif --site SITE` of the MPICH image (cached: a slow
    mksquashfs), keyed by the image, the site and the SIF writer."""
    key = hashlib.sha256(
        mpich_system_oci.name.encode()
        + site.read_bytes()
        + (REPO / "kit/image/sif.py").read_bytes()
    ).hexdigest()[:12]
    out = CACHE / "images" / f"mpich-apptainer-{key}.sif"
    with _locked(out):
        if not out.exists():
            done = convert_paired(mpich_system_oci, out, site, fmt="sif", level=1)
            assert not done.pair.missing, done.pair.missing
    return out


@pytest.fixture(scope="module")
def images(sif, mpich_paired, tmp_path_factory) -> dict[str, Path]:
    """The three forms: the SIF, its partition as a .sqfs, and the paired directory."""
    sqfs = tmp_path_factory.mktemp("sqfs") / "mpich.sqfs"
    with open(sif, "rb") as src, open(sqfs, "wb") as dst:
        src.seek(squashfs_at(sif))
        shutil.copyfileobj(src, dst, 1 << 20)
    return {"sif": sif, "squash": sqfs, "dir": mpich_paired}


@pytest.mark.parametrize("form", ["sif", "squash", "dir"])
def test_two_ranks_through_apptainer_map_the_host_mpich_and_allreduce(site, images, form):
    """The pair is read from inside each form (a SIF's through its partition's offset); both
    ranks map the host's libmpich from the bind and the image's own C library."""
    pair = make_pair(site, images[form])
    assert pair.document()["image_ready"]["ok"]
    result = run_check(pair)
    assert result.ok, (result.problems, result.output[-2000:])
    assert result.command[result.command.index("exec") - 1] == str(apptainer.apptainer())
    for rank in result.ranks:
        assert rank.size == 2 and rank.libraries == [HOST_LIB], rank
        assert rank.libc == ["/usr/lib/x86_64-linux-gnu/libc.so.6"], rank


def test_ranks_whose_environment_apptainer_cleans_are_refused_in_one_line(site, images):
    """APPTAINER_CLEANENV in the caller's environment: every rank starts as a job of its own and
    mpiexec exits 0; the check says so in one line, exit 1."""
    env = {**os.environ, "APPTAINER_CLEANENV": "1", "COLUMNS": "1000"}
    done = subprocess.run(
        [sys.executable, "-m", "kit", "mpi", "check", "--site", str(site), str(images["dir"])],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    fails = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert fails[0].startswith(
        "FAIL: MPI world of 1 rank(s), but the launcher started 2 (kit mpi check):"
    ), fails[0]
    assert "APPTAINER_CLEANENV" in fails[0] and "fix:" in fails[0]
