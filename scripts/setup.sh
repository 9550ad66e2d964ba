#!/usr/bin/env bash
# One idempotent setup for demo, tests and CI: system packages, .venv, the pinned
# Python stack and Horovod built against the system MPICH. A second run only checks.
# Needs: Debian 12 or Ubuntu 22.04+ as root (or the packages below already installed), the
# network, and Python 3.11 (Debian's python3.11, or PYTHON=/path/to/python3.11 on Ubuntu 24.04).
# --user (make check): no apt and nothing outside the venv, as any user; a missing Debian package
# is named, not installed, and Horovod and mpi4py are built only where an MPI compiler is present.
# --itex: the same steps for the Intel Extension for TensorFlow stack, from its own pin list
# (constraints-itex.txt: the full tensorflow build ITEX requires, which cannot share a venv with
# constraints.txt's tensorflow-cpu) into a venv of its own, .venv-itex (or KIT_VENV).
set -euo pipefail
USER_MODE=0 ITEX=0
for arg in "$@"; do
  case "$arg" in
    --user) USER_MODE=1 ;;
    --itex) ITEX=1 ;;
    *) echo "setup: unknown option $arg; fix: use --user and/or --itex" >&2; exit 1 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case ${XDG_CACHE_HOME:-} in /*) CACHE=${KIT_CACHE:-$XDG_CACHE_HOME/secure-site-kit} ;; *) CACHE=${KIT_CACHE:-$HOME/.cache/secure-site-kit} ;; esac  # kit/cachedir.py
if [ "$ITEX" = 1 ]; then
  VENV=${KIT_VENV:-$ROOT/.venv-itex}
  LOCK=$ROOT/constraints-itex.txt  # the ITEX stack's pin list (scripts/lock.sh --itex)
else
  VENV=${KIT_VENV:-$ROOT/.venv}
  LOCK=$ROOT/constraints.txt  # the one pin list (scripts/lock.sh): every version, with hashes
fi
mkdir -p "$CACHE"

log() { printf '\033[1msetup:\033[0m %s\n' "$*"; }
die() { echo "setup: $*" >&2; exit 1; }

# 1. Debian packages (the real parts the kit drives and the tests start).
APT_PACKAGES=(
  build-essential cmake pkg-config git
  mpich libmpich-dev hdf5-tools
  openmpi-bin libopenmpi3 libopenmpi-dev   # -dev: Open MPI's wrappers and headers (scripts/horovod-openmpi.sh)
  charliecloud squashfs-tools squashfuse fuse3
  proot   # udocker's P1/P2 modes (container.runtime: udocker; udocker itself is in the pin list: [udocker])
  buildah umoci skopeo mmdebstrap busybox-static
  slurm-wlm munge libpmi2-0 libpmix-dev   # Slurm's mpi/pmix dlopens pmix2/lib/libpmix.so (-dev only)
  openssh-server openssh-client rsync
  zstd pigz hwloc procps psmisc iproute2 strace
  siftool patchelf   # SIF images read back (tests); patchelf for scripts/apptainer.sh
)
OPTIONAL_PACKAGES=" siftool patchelf "  # not in every apt (Ubuntu 22.04): skipped when absent
# TensorFlow 2.15.1 runs on Python 3.9-3.11: the developer set-up uses 3.11, from apt unless
# PYTHON names another interpreter.
[ -n "${PYTHON:-}" ] || APT_PACKAGES+=(python3.11 python3.11-venv python3.11-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] && [ "$USER_MODE" = 1 ]; then
  log "not installing Debian packages (--user); the tests that need them skip: ${missing[*]}"
elif [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: fix: run as root, or ask an admin to 'apt-get install ${missing[*]}'" >&2
    exit 1
  fi
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  available=()
  for p in "${missing[@]}"; do
    if ! apt-cache show "$p" >/dev/null 2>&1 && [[ $OPTIONAL_PACKAGES == *" $p "* ]]; then
      log "this system's apt has no $p: the tests that need it skip"
      continue
    fi
    available+=("$p")
    apt-cache show "$p" >/dev/null 2>&1 || case "$p" in
      python3.11*) die "this system's apt has no $p (Ubuntu 24.04 ships Python 3.12); fix: install Python 3.11 (pyenv, uv python install 3.11, or a module) and rerun with PYTHON=/path/to/python3.11" ;;
      *) die "this system's apt has no package $p; fix: use Debian 12 or Ubuntu 22.04+, or install $p by hand" ;;
    esac
  done
  apt-get install -y -qq --no-install-recommends "${available[@]}" >/dev/null
  # Services must not start on their own: tests start their own instances.
  for s in slurmctld slurmd munge ssh; do service "$s" stop >/dev/null 2>&1 || true; done
else
  log "Debian packages present"
fi
# Open MPI (a second host-MPI family for the tests) raises its own mpirun/mpicc above MPICH's in
# Debian's alternatives; the developer stack (mpi4py, Horovod, bare `mpiexec`) is built on MPICH.
if [ "$(id -u)" -eq 0 ] && [ "$USER_MODE" = 0 ]; then
  [ "$(readlink -f /usr/bin/mpirun 2>/dev/null)" = /usr/bin/mpiexec.hydra ] ||
    update-alternatives --set mpirun /usr/bin/mpirun.mpich >/dev/null
  [ "$(readlink -f /usr/bin/mpicc 2>/dev/null)" = /usr/bin/mpicc.mpich ] ||
    update-alternatives --set mpi /usr/bin/mpicc.mpich >/dev/null
  # libopenmpi-dev points the multiarch mpi.h and libmpi.so at Open MPI's too
  inc=/usr/include/x86_64-linux-gnu
  [ ! -d "$inc/mpich" ] || [ "$(readlink -f "$inc/mpi" 2>/dev/null)" = "$inc/mpich" ] ||
    update-alternatives --set mpi-x86_64-linux-gnu "$inc/mpich" >/dev/null
fi

# 2. Virtual environment.
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || die "no $PY on PATH; fix: apt-get install python3.11 python3.11-venv python3.11-dev, or rerun with PYTHON=/path/to/python3.11"
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || die "$PY is Python $("$PY" -c 'import platform; print(platform.python_version())'), the set-up needs 3.11 (TensorFlow 2.15.1); fix: rerun with PYTHON=/path/to/python3.11"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV" || die "$PY -m venv failed; fix: apt-get install python3.11-venv (or use a Python with ensurepip via PYTHON=...)"
  "$VENV/bin/pip" install -q --upgrade pip wheel setuptools
fi
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check)
export PIP_NO_BINARY=mpi4py  # link mpi4py against the system MPICH, not a bundled MPI

# 3a. A distribution the pin list replaced by another that installs the same files (tensorflow by
# tensorflow-cpu: both write site-packages/tensorflow/) is uninstalled BEFORE its replacement goes
# in: uninstalled after, it would delete the replacement's files. The replacement is then
# (re)installed from the pin list, whole, even where an earlier attempt left it beside the old one.
"$VENV/bin/python" "$ROOT/kit/pins.py" replaced "$LOCK" > "$VENV/.kit-replaced.txt"
while read -r old new; do
  log "replacing $old by $new (the pin list's choice; both install the same files)"
  "$VENV/bin/pip" uninstall -q -y "$old"
  "$VENV/bin/python" "$ROOT/kit/pins.py" requirements "$LOCK" --only "$new" > "$VENV/.kit-new.txt"
  "${PIP[@]}" --require-hashes --no-deps --force-reinstall -r "$VENV/.kit-new.txt"
  rm -f "$VENV"/.kit-deps-*  # the stack is checked again below
done < "$VENV/.kit-replaced.txt"

# 3b. The pinned stack (every package of the pin list for this Python, hashes checked by pip),
# then the kit itself, editable; redone only when pyproject.toml, the pin list or this script changed.
# Without an MPI compiler (--user on a machine without MPICH) mpi4py cannot be built: the trainer
# then runs one process, and the tests that need MPI skip.
SKIP=(--exclude horovod)
WITH_MPI=1
if [ "$USER_MODE" = 1 ] && ! command -v mpicc >/dev/null 2>&1; then
  WITH_MPI=0 SKIP+=(--exclude mpi4py)
  log "no MPI compiler (mpicc): mpi4py and Horovod are not built; fix for 2-rank runs: apt-get install mpich libmpich-dev, then rerun"
fi
stamp="$VENV/.kit-deps-$WITH_MPI-$(cat "$ROOT/pyproject.toml" "$LOCK" "$0" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "installing the pinned Python stack ($(basename "$LOCK"): tensorflow, ...)"
  "$VENV/bin/python" "$ROOT/kit/pins.py" requirements "$LOCK" "${SKIP[@]}" > "$VENV/.kit-requirements.txt"
  "${PIP[@]}" --require-hashes --no-deps -r "$VENV/.kit-requirements.txt"
  "${PIP[@]}" --no-deps -e "$ROOT"
  "$VENV/bin/pip" check >/dev/null || die "the pin list misses a requirement ($("$VENV/bin/pip" check | head -n1)); fix: run scripts/lock.sh$([ "$ITEX" = 0 ] || echo ' --itex') and commit $(basename "$LOCK")"
  rm -f "$VENV"/.kit-deps-* && touch "$stamp"
else
  log "Python stack up to date"
fi

# 4. Horovod from its pinned sdist against MPI; the built wheel is cached across clones. Horovod's
# TensorFlow ops link TensorFlow's C++ library, so a wheel serves a venv whose TensorFlow has the
# same version: the ITEX stack reuses the main stack's (full tensorflow and tensorflow-cpu 2.15.1 are
# one build) and builds its own, into wheels/tensorflow-VERSION/, only where the versions differ or
# the reused wheel does not import.
hvd_ok() { TF_CPP_MIN_LOG_LEVEL=3 "$VENV/bin/python" -c "import horovod.tensorflow as h; assert h.mpi_built()" >/dev/null 2>&1; }
WHEELS=$CACHE/wheels
if [ "$ITEX" = 1 ]; then
  tf_itex=$("$VENV/bin/python" "$ROOT/kit/pins.py" version "$LOCK" tensorflow)
  tf_main=$("$VENV/bin/python" "$ROOT/kit/pins.py" version "$ROOT/constraints.txt" tensorflow-cpu)
  [ "$tf_itex" = "$tf_main" ] || WHEELS=$CACHE/wheels/tensorflow-$tf_itex
fi
if [ "$WITH_MPI" = 1 ] && ! hvd_ok; then
  hv=$("$VENV/bin/python" "$ROOT/kit/pins.py" version "$LOCK" horovod)
  whl=$(ls "$WHEELS"/horovod-"$hv"-*.whl 2>/dev/null | head -n1 || true)
  if [ -n "$whl" ] && [ "$ITEX" = 1 ]; then
    "${PIP[@]}" --no-deps --force-reinstall "$whl"
    hvd_ok || { log "the cached $(basename "$whl") does not import with tensorflow $tf_itex: building one for it"; WHEELS=$CACHE/wheels/tensorflow-$tf_itex; whl=; }
  fi
  if [ -z "$whl" ]; then
    mkdir -p "$WHEELS"
    log "building horovod $hv against MPICH (about 3 minutes on 2 cores)"
    "$VENV/bin/python" "$ROOT/kit/pins.py" requirements "$LOCK" --only horovod > "$VENV/.kit-horovod.txt"
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
    HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 MAKEFLAGS=-j2 \
      "$VENV/bin/pip" wheel -q --no-build-isolation --no-deps --no-binary horovod --require-hashes \
      -w "$WHEELS" -r "$VENV/.kit-horovod.txt"
    whl=$(ls "$WHEELS"/horovod-"$hv"-*.whl | head -n1)
  fi
  "${PIP[@]}" --no-deps --force-reinstall "$whl"
  hvd_ok || { echo "setup: horovod does not import with MPI support; fix: rm -r $WHEELS and rerun" >&2; exit 1; }
fi
# 5. ITEX: installed is not loaded (its library refuses CPUs it was not built for); say which, in
# one line, without failing: `gan3d train --itex on` refuses the same way, and the tests skip.
if [ "$ITEX" = 1 ]; then
  if why=$(PYTHONPATH=$ROOT "$VENV/bin/python" -m gan3d.itex --probe); then
    log "ITEX loads: $why"
  else
    log "ITEX is installed but does not load here: $why"
  fi
fi
# 6. Optional: a real Apptainer for its tests (never fails the set-up; says why when it cannot).
KIT_CACHE=$CACHE bash "$ROOT/scripts/apptainer.sh" || true
log "ready: $VENV"
