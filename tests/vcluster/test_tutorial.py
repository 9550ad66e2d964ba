"""docs/tutorial/cluster.md, run as its reader runs it: every console block in one shell, each
command's exit code and shown output checked, then what the page cannot show (where each rank ran,
over which MPI transport, in step). The session's two-node cluster stands in for the page's
`kit vcluster up` and `down` (shown, not run), and the suite's MPICH image for the recipe's build
(shown, not run: it needs a registry and about 15 minutes). That image has no TensorFlow: its
ranks run this checkout's Python, which the session's cluster binds in."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from tests.support.paths import REPO
from tests.support.tutorial import run_page
from tests.support.vcluster_runs import check_crossed

pytestmark = pytest.mark.slow
PAGE = REPO / "docs" / "tutorial" / "cluster.md"
CLUSTER = "vc"  # the page's cluster directory and name
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the MPICH image's


def stand_in(vcluster, work: Path) -> None:
    """WORK/vc as the page's `kit vcluster up --nodes 2 --dir vc` leaves it, for the session's
    cluster: its slurm.conf, and its site config under the page's name, with the page's image_dir
    (under a directory the cluster binds) and the venv's Python first on the ranks' PATH (the
    recipe's image puts its own there)."""
    ours = work / CLUSTER
    ours.mkdir()
    (ours / "slurm.conf").symlink_to(vcluster.conf)
    site = yaml.safe_load((Path(vcluster.directory) / "vcluster.yaml").read_text())
    site["name"] = CLUSTER
    site["container"]["image_dir"] = site["transfer"]["image_dir"] = str(ours / "images" / CLUSTER)
    site["host_mpi"]["env"]["PATH"] = f"{Path(sys.executable).parent}:{IMAGE_PATH}"
    (ours / "vcluster.yaml").write_text(yaml.safe_dump(site, sort_keys=False))


def page_env() -> dict[str, str]:
    """The reader's shell: the venv's kit and python first on PATH, no other test's Slurm, and a
    terminal width the page's tables were taken at."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "100"
    return env


@pytest.mark.timeout(2400)  # under 4 minutes on a loaded 2-core machine
def test_the_cluster_tutorial_runs_as_written(on_vcluster, mpich_oci, vcluster_work, capsys):
    vc = on_vcluster
    work = vcluster_work / "tutorial"
    work.mkdir()
    stand_in(vc, work)
    shutil.copy(mpich_oci, work / "gan3d.tar")  # where the build step writes
    run_page(PAGE, work, page_env(), timeout=2000)

    # What the page's output does not show: where each rank ran, over what, and in step
    sweep = work / CLUSTER / "calib"
    assert main(["scale", "collect", str(sweep), "--json"]) == 0
    runs = {r["run"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    names = [n["name"] for n in vc.nodes]
    one = json.loads(Path(runs["n1-r2-t1"]["result"]).read_text())["hostname_per_rank"][:1]
    assert one[0] in names
    for run, hosts in ((runs["n1-r2-t1"], one), (runs["n2-r2-t1"], names)):
        assert check_crossed(run, sweep, hosts, 2)["job"]["slurm_job_id"] == run["job"]
    launch = (sweep / "scripts" / "n2-r2-t1.sbatch").read_text().splitlines()[-1]
    assert launch.startswith("srun --mpi=pmi2 ch-run --join ")
    rows = list(csv.DictReader((sweep / "report" / "report.csv").open()))
    assert [float(r["efficiency_percent"]) > 0 for r in rows if r["nodes"] == "2"] == [True], rows
