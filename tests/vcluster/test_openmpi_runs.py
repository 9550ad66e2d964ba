"""Horovod's allreduce over a host Open MPI, on two virtual nodes, through `kit scale plan|submit|collect`
only, the batch script starting the ranks with Open MPI's own mpirun (its daemons started by srun
inside the job): the 3DGAN's tiny preset trains in `ch-run` with this machine's Open MPI 4.1.4 bound
into the small Open MPI image of tests/mpi.

The image carries Open MPI but not TensorFlow; like the Intel MPI runs (test_runs.py), the site binds
this checkout and the Python environment in. That environment is scripts/horovod-openmpi.sh's:
Horovod 0.28.1 and mpi4py built against Open MPI (the developer venv's are MPICH's), on the pinned
stack of the developer venv; built once per pin list under build/horovod-openmpi/ (docs/mpi-abi.md
gives the time it takes)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kit.cli import main
from tests.support.chrun_join import join_tags
from tests.support.parts import require
from tests.support.paths import REPO
from tests.support.training import tiny_train_args

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]
WAIT = "2400"  # seconds for one tiny training on 2 nodes of a loaded 2-core machine
BUILD_TIMEOUT = 3600  # the first build: mpi4py and Horovod compiled on 2 shared cores


@pytest.fixture(scope="session")
def openmpi_horovod_python() -> Path:
    """The python of a venv whose Horovod and mpi4py link Open MPI's libmpi.so.40 (the script
    checks).
    """
    require(
        shutil.which("mpicxx.openmpi") is not None
        and Path("/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h").is_file(),
        "Open MPI's compiler wrappers or headers missing (apt-get install libopenmpi-dev)",
    )
    run = subprocess.run(
        [str(REPO / "scripts" / "horovod-openmpi.sh")],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return Path(run.stdout.split()[-1])


def mpirun_site(site: Path, out: Path) -> Path:
    """The cluster's Open MPI site started by Open MPI's mpirun instead of srun --mpi=pmix (the same name:
    the image's pair is this site's), with the TCP BTL's verbose log (which interface, which peer)."""
    doc = yaml.safe_load(site.read_text())
    doc["host_mpi"]["launcher"] = (
        "/usr/bin/mpirun.openmpi"  # by path: /usr/bin/mpirun is MPICH's here
    )
    doc["host_mpi"]["openmpi"]["mca"]["btl_base_verbose"] = "100"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def test_horovod_trains_across_two_nodes_over_the_host_open_mpi_started_by_mpirun(
    on_vcluster, vc_openmpi_image, vc_data, vcluster_work, openmpi_horovod_python, capsys
):
    vc = on_vcluster
    site, image = vc_openmpi_image
    site = mpirun_site(site, vcluster_work / "openmpi-mpirun.yaml")
    sweep = vcluster_work / "sweep-openmpi-mpirun"
    assert (
        main(
            [
                "scale",
                "plan",
                "--site",
                str(site),
                "--image",
                str(image),
                "--nodes",
                "2",
                "--ranks-per-node",
                "1",
                "--python",
                str(openmpi_horovod_python),
                "--walltime",
                "00:30:00",
                "--dir",
                str(sweep),
                "--",
                *tiny_train_args(vc_data),
            ]
        )
        == 0
    )
    assert main(["scale", "submit", str(sweep)]) == 0
    capsys.readouterr()
    code = main(
        ["scale", "collect", str(sweep), "--wait", "--poll", "3", "--timeout", WAIT, "--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["problems"] == 0, [r["problem"] for r in doc["runs"]]
    (run,) = doc["runs"]

    script = (sweep / "scripts" / f"{run['run']}.sbatch").read_text()
    launch = script.splitlines()[-1]
    assert launch.startswith(
        "/usr/bin/mpirun.openmpi -n ${NRANKS} --map-by ppr:${RANKS_PER_NODE}:node:PE="
    )
    assert " ch-run --join --join-tag=${KIT_JOIN_TAG} " in launch and "srun" not in launch
    # the batch script's shell expands the tag before mpirun: both nodes' ranks got one value (they ran)
    [first], [again] = join_tags(script, "5"), join_tags(script, "5")
    assert first.startswith("--join-tag=kit-5-") and first != again

    nodes = [n["name"] for n in vc.nodes]
    result = json.loads(Path(run["result"]).read_text())
    assert result["hostname_per_rank"] == nodes  # one rank on each node, in order
    assert result["mpi_library_version"].startswith("Open MPI v4.1.4"), result[
        "mpi_library_version"
    ]
    assert len(result["weights_sha256_per_rank"]) == 2
    assert (
        len(set(result["weights_sha256_per_rank"])) == 1
    )  # Horovod's allreduce kept both ranks in step
    assert (
        result["weights_sha256_per_rank"][0] != result["weights_sha256_initial"]
    )  # and they trained

    # Open MPI's own account (btl_base_verbose): each rank reached the other over TCP on vc0
    log = (sweep / "logs" / f"{run['run']}-{run['job']}.out").read_text()
    for me, peer in ((0, 1), (1, 0)):
        assert re.search(rf"\[{nodes[me]}:\d+\] btl: tcp: Using interface: vc0", log), log[-3000:]
        assert re.search(
            rf"\[{nodes[me]}:\d+\] mca: bml: "
            rf"Using tcp btl for send to \[\[\d+,\d+\],{peer}\] on node {nodes[peer]}",
            log,
        ), log[-3000:]
