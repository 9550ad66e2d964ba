"""Run inside the container by `kit mpi check` (passed to python -c).

Init: each rank prints one KITINIT line to stderr as soon as MPI_Init has returned, so a check
that times out can say how many ranks got that far (a launcher waiting for a missing peer holds
the others in MPI_Init). Stderr: a launcher forwards each rank's output in pieces (Open MPI's
mpirun: 4 KiB) and writes another rank's between them, so stdout carries rank 0's report alone.
Host: the node's name, so a multi-node check can show its ranks really ran apart.
Mapped: the MPI libraries, and Open MPI's dlopen'ed components (mca_*.so), whose paths show
which MPI is really running. Libs: every shared object mapped (the MPI's dependencies, UCX's
transport modules, ...), judged against the pair by the check. Libc: where the C library came
from (the image's, unless a host library dir is on the loader's path).
Rank 0 gathers every rank's report and prints them as one JSON document in numbered lines of at
most CHUNK characters (KITCHECK I N TEXT): each line is written whole (less than a pipe's atomic
write), so a launcher that forwards output in pieces or interleaves other lines cannot break it.
"""

import json
import socket
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"\nKITINIT {comm.Get_rank()}", file=sys.stderr, flush=True)
with open("/proc/self/maps") as maps:
    files = {line.split()[-1] for line in maps if "/" in line}
mapped = sorted(f for f in files if "libmpi" in f or "libmpich" in f or "/mca_" in f)
libc = sorted(f for f in files if f.rsplit("/", 1)[-1].startswith(("libc.so", "libc-")))
mine = {
    "rank": comm.Get_rank(),
    "size": comm.Get_size(),
    "host": socket.gethostname(),
    "library_version": MPI.Get_library_version().strip(),
    "mapped": mapped,
    "libc": libc,
    "libs": sorted(f for f in files if ".so" in f.rsplit("/", 1)[-1]),
    "sum": comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM),
}
CHUNK = 1000
reports = comm.gather(mine, root=0)
if comm.Get_rank() == 0:
    text = json.dumps(reports)
    parts = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]
    for number, part in enumerate(parts):
        print(f"\nKITCHECK {number} {len(parts)} {part}", flush=True)
