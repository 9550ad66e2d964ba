"""`kit mpi check` through a real Apptainer (scripts/apptainer.sh; skipped naming why without
one) on this machine: Hydra's mpiexec starts 2 ranks, each `apptainer exec` of the kit's MPICH
test image as a directory, with this machine's Debian MPICH bound in. And the singleton trap:
ranks whose environment Apptainer cleans are refused in one line. (A SIF, srun and one rank on
each of two nodes: tests/vcluster/test_apptainer_runs.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.mpi import make_pair, run_check
from tests.support import apptainer
from tests.support.hostmpi import TARGET

pytestmark = pytest.mark.system
HOST_LIB = f"{TARGET}/lib0/libmpich.so.12.2.2"  # the host's libmpich as the ranks see it


@pytest.fixture(scope="module")
def site(mpich_host_site, tmp_path_factory) -> Path:
    """This machine's MPICH site, its ranks started by Apptainer."""
    doc = yaml.safe_load(mpich_host_site.read_text())
    doc["name"] = "mpich-apptainer"
    doc["container"]["runtime"] = "apptainer"
    doc["container"]["apptainer"] = {"executable": str(apptainer.apptainer())}
    path = tmp_path_factory.mktemp("site") / "mpich-apptainer.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_two_ranks_under_hydra_map_the_host_mpich_from_a_directory_image(site, mpich_paired):
    """The pair is read from the directory; both ranks map the host's libmpich from the bind and
    the image's own C library."""
    pair = make_pair(site, mpich_paired)
    assert pair.document()["image_ready"]["ok"]
    result = run_check(pair)
    assert result.ok, (result.problems, result.output[-2000:])
    assert Path(result.command[0]).name == "mpiexec"  # Hydra, as the site names it
    assert result.command[result.command.index("exec") - 1] == str(apptainer.apptainer())
    for rank in result.ranks:
        assert rank.size == 2 and rank.libraries == [HOST_LIB], rank
        assert rank.libc == ["/usr/lib/x86_64-linux-gnu/libc.so.6"], rank


def test_ranks_whose_environment_apptainer_cleans_are_refused_in_one_line(site, mpich_paired):
    """APPTAINER_CLEANENV in the caller's environment: every rank starts as a job of its own and
    mpiexec exits 0; the check says so in one line, exit 1."""
    env = {**os.environ, "APPTAINER_CLEANENV": "1", "COLUMNS": "1000"}
    done = subprocess.run(
        [sys.executable, "-m", "kit", "mpi", "check", "--site", str(site), str(mpich_paired)],
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
