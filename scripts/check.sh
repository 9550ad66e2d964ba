#!/usr/bin/env bash
# The laptop tier (make check): as any user, no apt, no daemons: the venv (scripts/setup.sh --user),
# then the static checks (scripts/lint.sh, run by test.sh), every unit and property test and a real
# tiny-GAN training, in a few minutes on 2 cores.
# Tests that need the full set-up (root, Slurm, Charliecloud, sshd, images) are `make test`'s.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
bash "$ROOT/scripts/setup.sh" --user
exec bash "$ROOT/scripts/test.sh" -m "not system and not slow" "$@"
