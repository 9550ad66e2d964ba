#!/usr/bin/env bash
# Runs the suite with the project's venv; USER must be set for ch-run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export USER=${USER:-$(id -un)}
exec "$ROOT/.venv/bin/python" -m pytest -ra "$@" "$ROOT/tests"
