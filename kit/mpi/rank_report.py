"""Run inside the container by `kit mpi check` (passed to python -c).

Host: the node's name, so a multi-node check can show its ranks really ran apart.
Mapped: the MPI libraries, and Open MPI's dlopen'ed components (mca_*.so), whose paths show
which MPI is really running.
Rank 0 gathers every rank's report and prints them as one JSON line, so the launcher's
interleaving of rank outputs cannot split a report.
"""
import json
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
with open("/proc/self/maps") as maps:
    mapped = sorted({line.split()[-1] for line in maps
                     if "/" in line and ("libmpi" in line or "libmpich" in line or "/mca_" in line)})
mine = {
    "rank": comm.Get_rank(), "size": comm.Get_size(), "host": socket.gethostname(),
    "library_version": MPI.Get_library_version().strip(),
    "mapped": mapped,
    "sum": comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM),
}
reports = comm.gather(mine, root=0)
if comm.Get_rank() == 0:
    print("\nKITCHECK " + json.dumps(reports), flush=True)
