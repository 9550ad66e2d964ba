#!/usr/bin/env bash
# Horovod (and mpi4py) built against Debian's Open MPI, in a venv of their own, for the proof that
# Horovod's allreduce runs over a host Open MPI bound into an image (tests/vcluster/test_openmpi_runs.py).
#
# The developer venv's Horovod and mpi4py are built against MPICH (scripts/setup.sh) and stay so:
# this venv holds only the two MPI-built packages and reads the rest of the pinned stack
# (TensorFlow, numpy, h5py, the kit's dependencies) from the developer venv through a .pth file, so
# nothing is installed twice and the developer venv is not touched. Versions come from the one
# pin list (constraints.txt). The result is cached under build/horovod-openmpi/KEY, KEY the sha256
# of the pin list and of Open MPI's version, so a second run only checks; it is made in KEY.part
# and renamed into place whole.
#
#   scripts/horovod-openmpi.sh           # prints the venv's python on its last line
#   KIT_VENV=/path/to/venv scripts/horovod-openmpi.sh
#
# Needs Open MPI's compiler wrappers and headers (apt-get install libopenmpi-dev). Installing that
# raises Open MPI above MPICH in Debian's alternatives (mpi, mpirun, mpi-x86_64-linux-gnu); this
# script calls mpicc.openmpi/mpicxx.openmpi by name and never reads the alternatives, and the
# developer stack wants MPICH there: `update-alternatives --set mpi-x86_64-linux-gnu
# /usr/include/x86_64-linux-gnu/mpich` (scripts/setup.sh resets mpi and mpirun).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE=${KIT_VENV:-$ROOT/.venv}
LOCK=$ROOT/constraints.txt
MPICC=${OMPI_MPICC:-/usr/bin/mpicc.openmpi}
MPICXX=${OMPI_MPICXX:-/usr/bin/mpicxx.openmpi}
MPIEXEC=${OMPI_MPIEXEC:-/usr/bin/mpiexec.openmpi}
log() { printf 'horovod-openmpi: %s\n' "$*" >&2; }
die() { printf 'horovod-openmpi: %s\n' "$*" >&2; exit 1; }

[ -x "$BASE/bin/python" ] || die "no venv at $BASE; fix: run scripts/setup.sh first (or set KIT_VENV)"
[ -x "$MPICC" ] && [ -x "$MPICXX" ] && [ -x "$MPIEXEC" ] || die "$MPICC, $MPICXX or $MPIEXEC missing; fix: apt-get install openmpi-bin libopenmpi-dev"
inc=$("$MPICC" -showme:incdirs | awk '{print $1}')
[ -f "$inc/mpi.h" ] || die "no mpi.h in $inc (Open MPI's headers); fix: apt-get install libopenmpi-dev"
ompi_version=$("$MPICC" -showme:version 2>&1 | head -n1)
key=$( { sha256sum < "$LOCK"; printf '%s\n' "$ompi_version"; } | sha256sum | cut -c1-16)
OUT=$ROOT/build/horovod-openmpi/$key
PY=$OUT/venv/bin/python

# Horovod's MPI operations must link Open MPI's libmpi.so.40, never MPICH's libmpich.so.12.
check() {
  TF_CPP_MIN_LOG_LEVEL=3 "$1" - <<'EOF'
import pathlib, sys
import horovod.tensorflow as hvd
import mpi4py.MPI as MPI
from kit.mpi.elf import elf_facts
assert hvd.mpi_built(), "horovod built without MPI"
libs = sorted(pathlib.Path(hvd.__file__).parent.glob("mpi_lib*.so")) + [pathlib.Path(MPI.__file__)]
for lib in libs:
    needed = elf_facts(lib).needed
    assert "libmpi.so.40" in needed and not any("mpich" in n for n in needed), (lib, needed)
assert MPI.Get_library_version().startswith("Open MPI"), MPI.Get_library_version()
EOF
}

mkdir -p "$ROOT/build/horovod-openmpi"
exec 9>"$ROOT/build/horovod-openmpi/.lock"
flock 9  # one build at a time; a second caller waits, then reuses it
if [ -x "$PY" ] && check "$PY" 2>/dev/null; then
  log "reusing $OUT"
  echo "$PY"
  exit 0
fi

start=$(date +%s)
PART=$OUT.part  # a run cut short resumes here: each step is skipped once its result checks
mkdir -p "$PART"
base_python=$("$BASE/bin/python" -c 'import sys; print(sys.executable)')
base_site=$("$BASE/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ -x "$PART/venv/bin/python" ] || "$base_python" -m venv "$PART/venv"
part_site=$("$PART/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# this checkout's kit and gan3d first; then the rest of the pinned stack, after this venv's own
# packages on sys.path (as a site dir: its own .pth files, e.g. namespace packages, still apply);
# pip is told to ignore what it finds there (--ignore-installed), or it would keep the MPICH builds
printf '%s\n' "$ROOT" > "$part_site/kit-checkout.pth"
printf 'import site; site.addsitedir(%s)\n' "'$(readlink -f "$base_site")'" > "$part_site/kit-developer-venv.pth"

"$BASE/bin/python" "$ROOT/kit/pins.py" requirements "$LOCK" --only mpi4py > "$PART/mpi4py.txt"
"$BASE/bin/python" "$ROOT/kit/pins.py" requirements "$LOCK" --only horovod > "$PART/horovod.txt"
if ! "$PART/venv/bin/python" -c 'import mpi4py.MPI as M; assert M.Get_library_version().startswith("Open MPI")' 2>/dev/null; then
  log "building mpi4py against $ompi_version"
  MPICC=$MPICC "$PART/venv/bin/pip" install -q --disable-pip-version-check --no-deps --require-hashes \
    --no-binary mpi4py --no-cache-dir --ignore-installed -r "$PART/mpi4py.txt"
fi
# Horovod's CMake finds MPI with FindMPI, which starts from the mpiexec on PATH (MPICH's here): a
# cmake wrapper (HOROVOD_CMAKE) names Open MPI's compiler wrappers and mpiexec outright
{
  echo '#!/bin/sh'
  echo 'case "$1" in --build|--version) exec cmake "$@";; esac'
  echo "exec cmake -DMPI_C_COMPILER=$MPICC -DMPI_CXX_COMPILER=$MPICXX -DMPIEXEC_EXECUTABLE=$MPIEXEC \"\$@\""
} > "$PART/cmake"
chmod +x "$PART/cmake"
log "building horovod against $ompi_version (minutes on 2 cores)"
HOROVOD_CMAKE=$PART/cmake HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 MAKEFLAGS=-j2 \
  "$PART/venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --require-hashes --no-binary horovod --no-cache-dir --ignore-installed -r "$PART/horovod.txt"
check "$PART/venv/bin/python" || die "the built horovod or mpi4py is not Open MPI's (see above)"
echo $(( $(date +%s) - start )) > "$PART/build-seconds"
rm -rf "$OUT"
mv "$PART" "$OUT"
# the venv's scripts name their interpreter by its build path: point them at the final one
sed -i "1s|^#!$PART/|#!$OUT/|" "$OUT"/venv/bin/* 2>/dev/null || true
log "built in $(cat "$OUT/build-seconds") s: $OUT"
echo "$PY"
