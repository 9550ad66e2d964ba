"""slurm.conf and the hosts file the nodes share: the host runs slurmctld, each node one slurmd."""

from __future__ import annotations

import os
from pathlib import Path

SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path: sun_path's 108, with its NUL
# The longest ids in a socket's name: Slurm's MaxJobId (67043328) and a batch step's (4294967291)
JOB_ID_DIGITS, STEP_ID_DIGITS = 8, 10


def slurm_conf(
    name: str,
    directory: Path,
    *,
    controller: str,
    host_address: str,
    nodes: list[dict],
    partition: str,
    cpus: int,
    ctld_port: int,
    slurmd_port: int,
) -> str:
    """Cgroup-free plugins (proctrack/linuxproc, task/none): namespaces give no cgroup of their own.
    SlurmdTimeout is short so that a node that dies is marked DOWN (and its job ended) within a
    minute, not the default five. TmpFS is per node: the nodes share the host's /tmp, where Slurm's
    PMIx plugin would otherwise make the same per-step directory on every node and fail the step."""
    d = directory
    lines = [
        f"ClusterName=kvc{name}",
        f"SlurmctldHost={controller}({host_address})",
        "SlurmUser=root",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={d / 'slurmctld'}",
        f"SlurmdSpoolDir={d / 'spool' / '%n'}",
        f"TmpFS={d / 'tmp' / '%n'}",
        f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={d / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={d / 'logs' / 'slurmctld.log'}",
        f"SlurmdLogFile={d / 'logs' / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdTimeout=20",
        "MailProg=/bin/true",
    ]
    lines += [
        f"NodeName={n['name']} NodeAddr={n['address']} CPUs={cpus} State=UNKNOWN" for n in nodes
    ]
    lines.append(
        f"PartitionName={partition} Nodes={','.join(n['name'] for n in nodes)} Default=YES "
        "MaxTime=INFINITE State=UP"
    )
    return (
        "# Written by `kit vcluster up`; `kit vcluster down` stops what it describes.\n"
        + "\n".join(lines)
        + "\n"
    )


def longest_socket(directory: Path, node_names: list[str]) -> str:
    """The longest path of a socket the cluster's daemons make under DIRECTORY: munged's, and per
    node slurmstepd's SPOOL/NODE_JOB.STEP and the PMIx plugin's SPOOL/stepd.slurm.pmix.JOB.STEP
    (as seen from these daemons). Past SOCKET_PATH_MAX, a job cannot launch and Slurm holds it."""
    ids = "9" * JOB_ID_DIGITS + "." + "9" * STEP_ID_DIGITS
    paths = [str(directory / "munge" / "munge.socket")]
    for node in node_names:
        spool = directory / "spool" / node
        paths += [f"{spool}/{node}_{ids}", f"{spool}/stepd.slurm.pmix.{ids}"]
    return max(paths, key=lambda p: len(os.fsencode(p)))


def hosts_file(controller: str, host_address: str, nodes: list[dict]) -> str:
    """Bound over /etc/hosts inside each node (its own mount namespace): names resolve as on a
    cluster with DNS, and the host's own /etc/hosts is never touched."""
    rows = ["127.0.0.1 localhost", f"{host_address} {controller}"]
    rows += [f"{n['address']} {n['name']}" for n in nodes]
    return "\n".join(rows) + "\n"
