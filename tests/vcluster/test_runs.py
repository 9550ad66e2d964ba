"""A scientist's sweep on two virtual nodes, through `kit scale plan|submit|collect|report` only: real
Slurm, Charliecloud (ch-run with the host's Intel MPI bound in), Intel MPI over TCP between the
nodes' namespaces, Horovod training the 3DGAN's tiny preset."""

from __future__ import annotations

import collections
import csv
import json
import re
import sys
from pathlib import Path

import pytest

from kit.cli import main
from tests.support.training import tiny_train_args

pytestmark = pytest.mark.slow
WAIT = "2000"  # seconds: four tiny trainings (up to 4 ranks), one after another on a loaded 2-core machine


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


def check_crossed(run: dict, sweep: Path, nodes: list[str], ranks_per_node: int) -> dict:
    """Ranks on the nodes the layout asks for, Intel MPI's tcp provider between them, equal
    weights.
    """
    result = json.loads(Path(run["result"]).read_text())
    per_node = collections.Counter(result["hostname_per_rank"])
    assert sorted(per_node) == nodes and set(per_node.values()) == {ranks_per_node}, per_node
    assert (result["nodes"], result["ranks_per_node"]) == (len(nodes), ranks_per_node)
    assert result["mpi_library_version"].startswith("Intel(R) MPI Library"), result[
        "mpi_library_version"
    ]
    assert len(result["weights_sha256_per_rank"]) == len(nodes) * ranks_per_node
    assert len(set(result["weights_sha256_per_rank"])) == 1  # Horovod kept every rank in step
    assert (
        result["weights_sha256_per_rank"][0] != result["weights_sha256_initial"]
    )  # and they trained
    log = (sweep / "logs" / f"{run['run']}-{run['job']}.out").read_text()
    # I_MPI_DEBUG=5 (the site config): Intel MPI names its transport and where each rank runs
    assert "MPI startup(): libfabric provider: tcp" in log
    placed = re.findall(r"MPI startup\(\): (\d+)\s+\d+\s+(\S+)\s+\{", log)
    assert (
        sorted({host for _, host in placed}) == nodes and len(placed) == len(nodes) * ranks_per_node
    )
    return result


@pytest.mark.timeout(
    2400
)  # about 5 minutes on 2 idle cores; 20 with five other test runs beside it
def test_a_sweep_over_one_and_two_nodes_via_srun(
    on_vcluster, vc_image, vc_data, vcluster_work, capsys
):
    vc = on_vcluster
    site = Path(vc.directory) / "vcluster.yaml"
    sweep = vcluster_work / "sweep-srun"
    runs = plan_and_run(site, vc_image("vcluster.yaml"), vc_data, sweep, "1,2", "1,2", capsys)
    assert sorted(runs) == [
        "n1-r1-t2",
        "n1-r2-t1",
        "n2-r1-t2",
        "n2-r2-t1",
    ]  # the node's 2 cores, shared evenly
    launch = (sweep / "scripts" / "n2-r2-t1.sbatch").read_text().splitlines()[-1]
    assert launch.startswith("srun --mpi=pmi2 ch-run --join ")
    names = [n["name"] for n in vc.nodes]
    for run_id, run in runs.items():
        nodes, ranks = int(run_id[1]), int(run_id[4])
        result = check_crossed(run, sweep, names[:nodes] if nodes == 2 else [_host(run)], ranks)
        assert result["job"]["slurm_job_id"] == run["job"]

    assert main(["scale", "report", str(sweep)]) == 0
    capsys.readouterr()
    rows = list(csv.DictReader((sweep / "report" / "report.csv").open()))
    two = [r for r in rows if r["nodes"] == "2"]
    assert len(two) == 2 and all(float(r["efficiency_percent"]) > 0 for r in two), (
        rows
    )  # one per ranks/node


def _host(run: dict) -> str:
    return json.loads(Path(run["result"]).read_text())["hostname_per_rank"][0]


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
