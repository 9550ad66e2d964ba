#!/usr/bin/env bash
# The static checks (scripts/lint.sh), then the whole suite (make test) with the project's venv, on
# every core (pytest-xdist: a test file per worker, the virtual cluster's tests on one:
# tests/conftest.py), the 25 slowest tests listed. Arguments go to pytest:
# `-m "not system and not slow"` is make check's tier. USER must be set for ch-run. The run keeps its
# temporary files in one directory of its own and removes it; what it leaves in /tmp fails it
# (tests/conftest.py, naming the test that ran when it appeared).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export USER=${USER:-$(id -un)}
bash "$ROOT/scripts/lint.sh"  # ruff and mypy first: a finding fails the target before the tests run
exec "$ROOT/.venv/bin/python" -m pytest -ra -n "${KIT_TEST_WORKERS:-2}" --durations=25 -m "" "$@" "$ROOT/tests"
