"""A virtual multi-node Slurm cluster on one machine: each node a network + UTS namespace with its
own address, hostname and slurmd; slurmctld and munged on the host; the host's filesystem shared.

It exists so that the multi-node paths (launch lines, host-MPI binds across nodes, allreduce over a
network, a node failing mid-run) run for real before a site does, on a laptop or in CI."""

from kit.vcluster.cluster import down, status, up
from kit.vcluster.state import ClusterState, VclusterError

__all__ = ["ClusterState", "VclusterError", "down", "status", "up"]
