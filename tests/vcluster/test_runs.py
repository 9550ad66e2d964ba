"""A scientist's sweep on two virtual nodes, through `kit scale plan|submit|collect` only: real Slurm,
Charliecloud (ch-run with the host's Intel MPI bound in), Intel MPI over TCP between the nodes'
namespaces, Horovod training the 3DGAN's tiny preset. Here Intel MPI's own mpiexec.hydra starts the
ranks; the srun launch, 1 and 2 nodes of 2 ranks each, runs in docs/tutorial/cluster.md
(test_tutorial.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kit.cli import main
from tests.support.training import tiny_train_args
from tests.support.vcluster_runs import check_crossed

pytestmark = pytest.mark.slow
WAIT = "2000"  # seconds: a tiny 2-node training on a loaded 2-core machine


def counters(link: str) -> dict[str, int]:
    """Bytes through a host-side veth: what crossed between a node and the rest of the cluster."""
    base = Path("/sys/class/net", link, "statistics")
    return {k: int((base / f"{k}_bytes").read_text()) for k in ("rx", "tx")}


def plan_and_run(
    site: Path,
    image: Path,
    data: list[Path],
    sweep: Path,
    nodes: str,
    ranks: str,
    capsys,
    extra: tuple[str, ...] = (),
) -> dict:
    argv = [
        "scale",
        "plan",
        "--site",
        str(site),
        "--image",
        str(image),
        "--nodes",
        nodes,
        "--ranks-per-node",
        ranks,
        "--python",
        sys.executable,
        "--walltime",
        "00:15:00",
        "--dir",
        str(sweep),
        "--",
        *tiny_train_args(data),
        *extra,
    ]
    assert main(argv) == 0
    assert main(["scale", "submit", str(sweep)]) == 0
    capsys.readouterr()
    code = main(
        ["scale", "collect", str(sweep), "--wait", "--poll", "3", "--timeout", WAIT, "--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["problems"] == 0, [r["problem"] for r in doc["runs"]]
    return {r["run"]: r for r in doc["runs"]}


def gradient_bytes(preset: str) -> int:
    """One data-parallel step all-reduces every trainable fp32 weight's gradient of both models; with
    two ranks each rank sends at least that many bytes per step (ring all-reduce)."""
    from gan3d.model import discriminator, generator

    return 4 * sum(
        int(v.shape.num_elements())
        for m in (generator(preset), discriminator(preset))
        for v in m.trainable_variables
    )


@pytest.mark.timeout(2400)
def test_two_nodes_via_intel_mpis_own_mpiexec(
    on_vcluster, vc_image, vc_data, vcluster_work, capsys
):
    """As on SuperMUC-NG: Hydra (mpiexec.hydra) starts its proxies on the nodes with srun. The only
    job on the cluster, so the bytes through node 2's veth are its own (and Slurm's few)."""
    vc = on_vcluster
    site = Path(vc.directory) / "vcluster-hydra.yaml"
    sweep = vcluster_work / "sweep-hydra"
    image = vc_image("vcluster-hydra.yaml")
    before = counters(vc.nodes[1]["veth"])
    runs = plan_and_run(site, image, vc_data, sweep, "2", "1", capsys)
    after = counters(vc.nodes[1]["veth"])
    launch = (sweep / "scripts" / "n2-r1-t2.sbatch").read_text().splitlines()[-1]
    assert re.match(
        r"\S+/bin/mpiexec\.hydra -n \$\{NRANKS\} ch-run --join-ct=\$\{RANKS_PER_NODE\} ", launch
    )
    result = check_crossed(runs["n2-r1-t2"], sweep, [n["name"] for n in vc.nodes], 1)
    steps = result["epochs"] * result["steps_per_epoch"]
    floor = steps * gradient_bytes(result["preset"])  # what Horovod's all-reduces alone must move
    for direction in ("rx", "tx"):  # node 2 sent and received its share over the network
        assert after[direction] - before[direction] >= floor, (direction, before, after, floor)
