"""What a training run on the virtual cluster must show in its results and its log, whichever way
its ranks were started (tests/vcluster: test_runs.py, test_tutorial.py)."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path


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
