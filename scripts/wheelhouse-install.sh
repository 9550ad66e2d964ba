#!/bin/sh
# install.sh [VENV] [EXTRAS]: installs secure-site-kit from this wheelhouse alone, on a login
# node with no root, no internet and no compiler: checks every file against SHA256SUMS, makes
# a venv with the site's Python (the one the wheelhouse was made for) and pip-installs from
# this directory only. VENV defaults to ~/.local/share/secure-site-kit/venv; EXTRAS is a
# comma list (report, convert, transfer, build, train) of those the wheelhouse was made with.
# PYTHON picks the interpreter (default: python3).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${1:-$HOME/.local/share/secure-site-kit/venv}
EXTRAS=${2:-}
PY=${PYTHON:-python3}
# This directory only: no pip.conf index or find-links of the login node takes part.
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_REQUIRE_VIRTUALENV 2>/dev/null || true
die() { echo "install.sh: $*" >&2; exit 1; }

[ -f "$HERE/SHA256SUMS" ] || die "$HERE/SHA256SUMS is missing; fix: copy the whole wheelhouse directory"
if ! report=$(cd "$HERE" && sha256sum --check --quiet --strict SHA256SUMS 2>&1); then
  bad=$(printf '%s\n' "$report" | sed -n 's/: FAILED.*//p' | head -n1)
  die "$HERE/${bad:-SHA256SUMS} does not match SHA256SUMS (a damaged or partial copy); fix: copy the wheelhouse again"
fi
want=$(cat "$HERE/PYTHON_VERSION")
command -v "$PY" >/dev/null 2>&1 || die "no $PY on PATH; fix: load a Python $want (e.g. module load python) or set PYTHON=/path/to/python$want"
have=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$have" = "$want" ] || die "$PY is Python $have but this wheelhouse is for Python $want; fix: set PYTHON=/path/to/python$want, or make the wheelhouse with PYTHON=python$have"
for extra in $(echo "$EXTRAS" | tr ',' ' '); do
  grep -qx "$extra" "$HERE/EXTRAS" || die "extra '$extra' is not in this wheelhouse (it has: $(tr '\n' ' ' < "$HERE/EXTRAS")); fix: make the wheelhouse with EXTRAS=$EXTRAS"
done
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" || die "$PY -m venv $VENV failed; fix: use a Python with the venv module (Debian: python3-venv)"
fi
# A venv an earlier wheelhouse made may hold a distribution the pin list has since replaced by
# another that installs the same files (tensorflow by tensorflow-cpu): where this wheelhouse
# brings the replacement, the old one goes first (removed later, it would delete files of its
# replacement), then the replacement is installed whole.
replaced=$("$VENV/bin/python" "$HERE/pins.py" replaced "$HERE/constraints.txt") \
  || die "could not read $HERE/constraints.txt (see above); fix: copy the wheelhouse again"
printf '%s\n' "$replaced" | while read -r old new; do
  ls "$HERE/$(echo "$new" | tr - _)"-*.whl >/dev/null 2>&1 || continue
  "$VENV/bin/python" -m pip uninstall --quiet -y "$old" || die "pip could not uninstall $old from $VENV (see above)"
  "$VENV/bin/python" -m pip install --quiet --no-index --find-links "$HERE" --no-deps --force-reinstall "$new" \
    || die "pip could not install $new from $HERE (see above)"
done
"$VENV/bin/python" -m pip install --quiet --no-index --find-links "$HERE" \
  "secure-site-kit${EXTRAS:+[$EXTRAS]}" || die "pip could not install from $HERE (see above)"
if [ -f "$HERE/horovod/BUILD.sh" ] && echo ",$EXTRAS," | grep -q ',train,'; then
  echo "install.sh: for --no-container runs build Horovod against the site's MPI: sh $HERE/horovod/BUILD.sh $VENV"
fi
echo "install.sh: installed; run $VENV/bin/kit (add $VENV/bin to PATH)"
