"""Run inside the container by `kit mpi check` (passed to python -c).

Host: the node's name, so a multi-node check can show its ranks really ran apart.
Mapped: the MPI libraries, and Open MPI's dlopen'ed components (mca_*.so), whose paths show
which MPI is really running. Libc: where the C library came from (the image's, unless a host
library dir is on the loader's path).
Rank 0 gathers every rank's report and prints them as one JSON line, so the launcher's
interleaving of rank outputs cannot split a report.
"""
import json
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
with open("/proc/self/maps") as maps:
    files = {line.split()[-1] for line in maps if "/" in line}
mapped = sorted(f for f in files if "libmpi" in f or "libmpich" in f or "/mca_" in f)
libc = sorted(f for f in files if f.rsplit("/", 1)[-1].startswith(("libc.so", "libc-")))
mine = {
    "rank": comm.Get_rank(), "size": comm.Get_size(), "host": socket.gethostname(),
    "library_version": MPI.Get_library_version().strip(),
    "mapped": mapped,
    "libc": libc,
    "sum": comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM),
}
reports = comm.gather(mine, root=0)
if comm.Get_rank() == 0:
    print("\nKITCHECK " + json.dumps(reports), flush=True)
