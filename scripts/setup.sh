#!/usr/bin/env bash
# One idempotent setup for demo, tests and CI: system packages, .venv, the pinned
# Python stack and Horovod built against the system MPICH. A second run only checks.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${KIT_VENV:-$ROOT/.venv}
CACHE=${KIT_CACHE:-$HOME/.cache/secure-site-kit}
PY=${PYTHON:-python3.11}
mkdir -p "$CACHE"

log() { printf '\033[1msetup:\033[0m %s\n' "$*"; }

# 1. Debian packages (the real parts the kit drives and the tests start).
APT_PACKAGES=(
  build-essential cmake pkg-config git
  mpich libmpich-dev hdf5-tools
  charliecloud squashfs-tools squashfuse fuse3
  buildah umoci skopeo mmdebstrap busybox-static
  slurm-wlm munge libpmi2-0
  openssh-server openssh-client rsync
  zstd pigz hwloc procps psmisc iproute2
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: fix: run as root, or ask an admin to 'apt-get install ${missing[*]}'" >&2
    exit 1
  fi
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Services must not start on their own: tests start their own instances.
  for s in slurmctld slurmd munge ssh; do service "$s" stop >/dev/null 2>&1 || true; done
else
  log "Debian packages present"
fi

# 2. Virtual environment.
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip wheel setuptools
fi
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check)
export PIP_NO_BINARY=mpi4py  # link mpi4py against the system MPICH, not a bundled MPI

# 3. The pinned stack, reinstalled only when pyproject.toml or this script changed.
stamp="$VENV/.kit-deps-$(cat "$ROOT/pyproject.toml" "$0" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "installing the pinned Python stack (tensorflow 2.15.1, ...)"
  "${PIP[@]}" -e "$ROOT[train,test]"
  rm -f "$VENV"/.kit-deps-* && touch "$stamp"
else
  log "Python stack up to date"
fi

# 4. Horovod 0.28.1 from source against MPI; the built wheel is cached across clones.
hvd_ok() { TF_CPP_MIN_LOG_LEVEL=3 "$VENV/bin/python" -c "import horovod.tensorflow as h; assert h.mpi_built()" >/dev/null 2>&1; }
if ! hvd_ok; then
  whl=$(ls "$CACHE"/wheels/horovod-0.28.1-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$whl" ]; then
    log "building horovod 0.28.1 against MPICH (about 3 minutes on 2 cores)"
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
    HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 MAKEFLAGS=-j2 \
      "$VENV/bin/pip" wheel -q --no-build-isolation --no-deps --no-binary horovod \
      -w "$CACHE/wheels" horovod==0.28.1
    whl=$(ls "$CACHE"/wheels/horovod-0.28.1-*.whl | head -n1)
  fi
  "${PIP[@]}" --no-deps --force-reinstall "$whl"
  "${PIP[@]}" cloudpickle psutil pyyaml packaging cffi
  hvd_ok || { echo "setup: horovod does not import with MPI support; fix: rm -r $CACHE/wheels and rerun" >&2; exit 1; }
fi
log "ready: $VENV"
