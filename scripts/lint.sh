#!/usr/bin/env bash
# Static checks, configured in pyproject.toml: ruff (pyflakes, import order, pyupgrade for Python 3.9,
# bugbear; the formatter's layout, 100 columns) over the repository, mypy over kit/ and gan3d/ with the
# imports resolved in the project's venv, lint-imports (the layers of docs/architecture.md, no import
# cycles within a package), and scripts/string_splits.py (a string split over lines is split between
# phrases, so a grep for a message's words finds it). make test and make check run it before the
# tests.
#   scripts/lint.sh         check only; exit 1 on any finding
#   scripts/lint.sh --fix   first the mechanical part: strings split mid-phrase reflowed, ruff's
#                           safe fixes (import order, pyupgrade rewrites) and its formatter (long
#                           lines wrapped), then the checks
# KIT_VENV: the project's venv (default .venv); KIT_LINT_VENV: where the checkers are installed
# (default: the project's venv, whose test extra pins them).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${KIT_VENV:-$ROOT/.venv}
TOOLS=${KIT_LINT_VENV:-$VENV}
case ${XDG_CACHE_HOME:-} in /*) CACHE=${KIT_CACHE:-$XDG_CACHE_HOME/secure-site-kit} ;; *) CACHE=${KIT_CACHE:-$HOME/.cache/secure-site-kit} ;; esac  # kit/cachedir.py
export RUFF_CACHE_DIR=$CACHE/ruff MYPY_CACHE_DIR=$CACHE/mypy  # no cache directories in the checkout
cd "$ROOT"
for tool in ruff mypy lint-imports; do
  if [ ! -x "$TOOLS/bin/$tool" ]; then
    echo "lint: $TOOLS/bin/$tool not found; fix: scripts/setup.sh (it installs the test extra)" >&2
    exit 1
  fi
done
if [ "${1:-}" = --fix ]; then
  "$VENV/bin/python" -m scripts.string_splits --fix >/dev/null || true  # before the formatter, which joins what fits
  "$TOOLS/bin/ruff" check --fix --quiet . || true  # what is left is reported by the check below
  "$TOOLS/bin/ruff" format --quiet .
elif [ -n "${1:-}" ]; then
  echo "lint: unknown argument ${1}; usage: scripts/lint.sh [--fix]" >&2
  exit 2
fi
status=0
"$TOOLS/bin/ruff" check . || status=1
"$TOOLS/bin/ruff" format --check --quiet . || { echo "lint: fix: scripts/lint.sh --fix (the formatter)" >&2; status=1; }
"$VENV/bin/python" -m scripts.string_splits || status=1
"$TOOLS/bin/mypy" --python-executable "$VENV/bin/python" || status=1
# This checkout's packages, not the ones an editable install elsewhere points at.
PYTHONPATH=$ROOT "$TOOLS/bin/lint-imports" --cache-dir "$CACHE/import-linter" || status=1
exit "$status"
