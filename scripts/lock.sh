#!/usr/bin/env bash
# Resolves pyproject.toml's requirements (core and every extra) into constraints.txt,
# the one pin list: every package at one version per Python (3.9-3.12), each with the sha256 of
# all its files, so setup.sh, the image recipe and `make wheelhouse` install exactly these.
# Run after changing a requirement in pyproject.toml; commit both. Needs the network.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${KIT_CACHE:-$HOME/.cache/secure-site-kit}
UV=$(command -v uv || true)
if [ -z "$UV" ]; then  # a private venv for the resolver: nothing installed into the project's
  [ -x "$CACHE/uv-venv/bin/uv" ] || { python3 -m venv "$CACHE/uv-venv" && "$CACHE/uv-venv/bin/pip" install -q uv; }
  UV=$CACHE/uv-venv/bin/uv
fi
cd "$ROOT"
# The current pins are the resolver's preferences: a new requirement adds its packages and moves
# nothing else (uv keeps an output file's versions where they still satisfy pyproject.toml).
cp constraints.txt constraints.txt.part
"$UV" pip compile pyproject.toml --universal --python-version 3.9 --generate-hashes --no-python-downloads \
  --extra report --extra convert --extra transfer --extra build --extra train --extra horovod --extra study --extra test \
  --custom-compile-command "scripts/lock.sh" -o constraints.txt.part --quiet
mv constraints.txt.part constraints.txt
echo "lock: constraints.txt ($(grep -c '^[a-z]' constraints.txt) pins)"
