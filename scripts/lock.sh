#!/usr/bin/env bash
# Resolves pyproject.toml's requirements (core and every extra) into constraints.txt,
# the one pin list: every package at one version per Python (3.9-3.12), each with the sha256 of
# all its files, so setup.sh, the image recipe and `make wheelhouse` install exactly these.
# Then checks that every pin has a wheel for each (Python, platform) README promises (3.9-3.12 on
# manylinux2014_x86_64 and manylinux_2_28_x86_64; kit/wheelcheck.py: index pages and wheel
# metadata only, results cached in ~/.cache/secure-site-kit/wheel-check) and keeps the old list,
# naming package, version and platform, when one has none.
# Run after changing a requirement in pyproject.toml; commit both. Needs the network.
#   scripts/lock.sh --check   only the check, of the current constraints.txt
#   scripts/lock.sh --itex    constraints-itex.txt, the ITEX stack's pin list (Python 3.11, x86_64
#                             Linux: the developer set-up's; setup.sh --itex installs it)
#   scripts/lock.sh --upgrade-package NAME ...   other arguments go to `uv pip compile`: NAME to the
#                             newest version pyproject.toml allows (else the current pins are kept)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case ${XDG_CACHE_HOME:-} in /*) CACHE=${KIT_CACHE:-$XDG_CACHE_HOME/secure-site-kit} ;; *) CACHE=${KIT_CACHE:-$HOME/.cache/secure-site-kit} ;; esac  # kit/cachedir.py
export KIT_CACHE=$CACHE
cd "$ROOT"
# The check's pip, in a private venv (nothing installed into the project's): pip before 24 judges a
# wheel's Requires-Python by the Python running it, not by --python-version.
TOOLS=$CACHE/uv-venv
[ -x "$TOOLS/bin/python" ] || python3 -m venv "$TOOLS"
"$TOOLS/bin/python" -c 'import pip, sys; sys.exit(int(pip.__version__.split(".")[0]) < 24)' \
  || "$TOOLS/bin/python" -m pip install -q --upgrade pip
check() { PYTHONPATH=$ROOT PIP_CACHE_DIR=$CACHE/pip "$TOOLS/bin/python" -m kit.wheelcheck lock "$1"; }
if [ "${1:-}" = --check ]; then
  check constraints.txt
  exit
fi
UV=$(command -v uv || true)
if [ -z "$UV" ]; then  # a private venv for the resolver: nothing installed into the project's
  [ -x "$TOOLS/bin/uv" ] || "$TOOLS/bin/python" -m pip install -q uv
  UV=$TOOLS/bin/uv
fi
if [ "${1:-}" = --itex ]; then  # the second pin list (constraints-itex.in says why there are two)
  shift
  # Preferences: its own earlier pins, else the main list's, so the two stacks differ only where ITEX
  # needs it. tensorflow-cpu (the train extra's) is dropped by an override with a marker never true.
  [ -f constraints-itex.txt ] && cp constraints-itex.txt constraints-itex.txt.part \
    || cp constraints.txt constraints-itex.txt.part
  "$UV" pip compile pyproject.toml constraints-itex.in --extra train --extra horovod \
    --override <(echo "tensorflow-cpu ; sys_platform == 'never'") \
    --python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes --no-python-downloads \
    --custom-compile-command "scripts/lock.sh --itex" -o constraints-itex.txt.part --quiet "$@"
  mv constraints-itex.txt.part constraints-itex.txt
  echo "lock: constraints-itex.txt ($(grep -c '^[a-z]' constraints-itex.txt) pins, Python 3.11 on x86_64 Linux)"
  exit
fi
# The current pins are the resolver's preferences: a new requirement adds its packages and moves
# nothing else (uv keeps an output file's versions where they still satisfy pyproject.toml).
cp constraints.txt constraints.txt.part
"$UV" pip compile pyproject.toml --universal --python-version 3.9 --generate-hashes --no-python-downloads \
  --extra report --extra convert --extra transfer --extra build --extra train --extra horovod --extra study --extra udocker --extra test \
  --custom-compile-command "scripts/lock.sh" -o constraints.txt.part --quiet "$@"
if ! check constraints.txt.part; then
  rm -f constraints.txt.part
  echo "lock: constraints.txt left as it was" >&2
  exit 1
fi
mv constraints.txt.part constraints.txt
echo "lock: constraints.txt ($(grep -c '^[a-z]' constraints.txt) pins)"
