#!/usr/bin/env bash
# A virtual N-node Slurm cluster on this machine (root): scripts/vcluster.sh up --nodes N | down | status.
# A thin wrapper over `kit vcluster` (its options follow, e.g. --dir, --name, --intel-mpi).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
exec "$PY" -m kit vcluster "$@"
