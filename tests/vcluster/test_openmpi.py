"""The Open MPI family on two virtual nodes: this machine's Open MPI 4.1.4 (Debian) as the site's
host MPI, bound into the small Open MPI image of tests/mpi, one rank on each node, started by Slurm's
srun --mpi=pmix and by Open MPI's own mpirun (its daemons started with srun inside an allocation).

Horovod is not in this image (building it against Open MPI takes longer than the whole suite may):
these tests prove the MPI layer Horovod's allreduce runs on, with mpi4py; Horovod over Open MPI is
proven by building images/gan3d-openmpi.Dockerfile (docs/mpi-abi.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kit import mpi
from kit.cli import main
from kit.mpi import make_pair, run_check
from tests.support.hostmpi import TARGET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
COMPONENTS = f"{TARGET}/ompi-components/"
WAIT = 300.0  # seconds for one check: two ranks, but five other test runs may share the 2 cores


def _variant(site: Path, tmp_path: Path, **changes) -> Path:
    """The cluster's Open MPI site with host_mpi fields changed (another launcher, other MCA
    settings).
    """
    doc = yaml.safe_load(site.read_text())
    doc["name"] = f"{doc['name']}-variant"
    doc["host_mpi"].update(changes.pop("host_mpi", {}))
    doc["host_mpi"]["openmpi"]["mca"].update(changes.pop("mca", {}))
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _one_rank_per_node_on_the_host_open_mpi(result, nodes: list[str]) -> None:
    assert result.ok, (result.problems, result.output[-3000:])
    assert [(r.rank, r.host) for r in result.ranks] == list(
        enumerate(nodes)
    )  # block mapping: rank i on node i+1
    for r in result.ranks:
        assert (
            r.library_version.startswith("Open MPI v4.1.4") and r.size == 2 and r.sum == 3
        )  # 1 + 2
        assert [m for m in r.mapped if "/mca_" not in m] == [f"{TARGET}/lib0/libmpi.so.40.30.4"]
        assert r.libc == [
            "/usr/lib/x86_64-linux-gnu/libc.so.6"
        ]  # the image's: no host dir on the loader's path
        components = [m for m in r.mapped if "/mca_" in m]
        assert components and all(c.startswith(COMPONENTS) for c in components), (
            components
        )  # none of the image's
        # no peer on its node: shared memory (vader) found nothing to do and was unloaded; tcp stayed
        assert (
            f"{COMPONENTS}mca_btl_tcp.so" in components
            and f"{COMPONENTS}mca_btl_vader.so" not in components
        )


def test_srun_pmix_puts_one_rank_on_each_node_talking_tcp_over_the_veths(
    on_vcluster, vc_openmpi_image, monkeypatch, capsys
):
    """One check, through the command line: its verdict and the result it judged (kept on the
    way).
    """
    vc = on_vcluster
    site, image = vc_openmpi_image
    mca = yaml.safe_load(site.read_text())["host_mpi"]["openmpi"]["mca"]
    assert (mca["btl_tcp_if_include"], mca["oob_tcp_if_include"]) == ("vc0", vc.subnet)
    nodes = [n["name"] for n in vc.nodes]
    monkeypatch.setenv("OMPI_MCA_btl_base_verbose", "100")  # each rank logs its BTL choice per peer
    results = []

    def kept(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    real = mpi.run_check
    monkeypatch.setattr(mpi, "run_check", kept)
    code = main(
        ["mpi", "check", "--site", str(site), str(image), "--nodes", "2", "--timeout", str(WAIT)]
    )
    out = " ".join(capsys.readouterr().out.split())  # rich wraps at the terminal's width
    [result] = results
    assert result.command[:8] == [
        "srun",
        "--mpi=pmix",
        "-N",
        "2",
        "-n",
        "2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
    ]
    _one_rank_per_node_on_the_host_open_mpi(result, nodes)
    assert (
        code == 0 and all(n in out for n in nodes) and "allreduce across 2 nodes is right" in out
    ), out

    # Open MPI's own account: each rank reaches the other over the TCP BTL, on vc0, at the other's address
    log = result.output
    for me, peer in ((0, 1), (1, 0)):
        host = rf"\[{nodes[me]}:\d+\]"
        assert re.search(rf"{host} btl: tcp: Using interface: vc0", log)
        assert re.search(
            rf"{host} mca: bml: Using tcp btl for send to \[\[\d+,\d+\],{peer}\] on node {nodes[peer]}",
            log,
        )
    connected = set(
        re.findall(r"btl:tcp: (?:now connected to|connect\(\) to) (\d+\.\d+\.\d+\.\d+)", log)
    )
    assert connected and connected <= {n["address"] for n in vc.nodes}, connected


def test_open_mpis_own_mpirun_starts_its_daemons_on_both_nodes(
    on_vcluster, vc_openmpi_image, tmp_path
):
    """From the login node (this host, outside the nodes' namespaces): salloc 2 nodes, mpirun starts
    an orted on each with srun and reaches them over the subnet (oob_tcp_if_include)."""
    site, image = vc_openmpi_image
    mpirun = _variant(site, tmp_path, host_mpi={"launcher": "/usr/bin/mpirun.openmpi"})
    result = run_check(make_pair(mpirun, image), timeout=WAIT, nodes=2)
    assert result.command[0] == "salloc" and "--nodes=2" in result.command
    assert result.command[result.command.index("/usr/bin/mpirun.openmpi") + 1 :][:3] == [
        "--allow-run-as-root",
        "--map-by",
        "ppr:1:node",
    ]
    _one_rank_per_node_on_the_host_open_mpi(result, [n["name"] for n in on_vcluster.nodes])


def test_without_the_tcp_btl_the_nodes_cannot_reach_each_other(
    on_vcluster, vc_openmpi_image, tmp_path
):
    """The control: shared memory alone cannot span two nodes, so the same check fails, and ends at
    once (srun --kill-on-bad-exit) rather than at the timeout: the passing runs did cross the network."""
    site, image = vc_openmpi_image
    no_tcp = _variant(site, tmp_path, mca={"btl": "self,vader"})
    result = run_check(make_pair(no_tcp, image), timeout=WAIT, nodes=2)
    assert not result.ok and "ranks did not finish" not in " ".join(result.problems)
    assert any("launcher exit status" in p for p in result.problems), (
        result.problems
    )  # kit.mpi.check._judge
    assert (
        "unable to reach each other" in result.output and "BTLs attempted: self" in result.output
    ), result.output[-3000:]
