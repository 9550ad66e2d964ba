#!/usr/bin/env bash
# make wheelhouse: what a login node with no internet needs to install the kit (dist/wheelhouse/):
# the kit's wheel, the wheels of the core and the chosen extras for the site's platform and
# Python, each checked against constraints.txt's hashes, Horovod's pinned sdist and a build
# recipe when [train] is chosen, install.sh, and SHA256SUMS over all of it.
#   PYTHON    an interpreter of the site's Python version (default python3): pip evaluates the pin
#             list's markers with the Python that runs it
#   EXTRAS    comma list (default report; train adds Horovod's sdist)
#   PLATFORM  the site's wheel platform tag(s), comma-separated (default manylinux2014_x86_64: glibc
#             >= 2.17; manylinux_2_N_x86_64 for the site's glibc 2.N also takes older manylinux wheels)
#   OUT       default dist/wheelhouse
# Downloads are cached in ~/.cache/secure-site-kit/pip, so a re-run fetches only index pages.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
EXTRAS=${EXTRAS:-report}
PLATFORM=${PLATFORM:-manylinux2014_x86_64}
OUT=${OUT:-$ROOT/dist/wheelhouse}
case ${XDG_CACHE_HOME:-} in /*) CACHE=${KIT_CACHE:-$XDG_CACHE_HOME/secure-site-kit} ;; *) CACHE=${KIT_CACHE:-$HOME/.cache/secure-site-kit} ;; esac  # kit/cachedir.py
LOCK=$ROOT/constraints.txt
MARK=.secure-site-kit-wheelhouse  # what this script made, and so may replace
die() { echo "wheelhouse: $*" >&2; exit 1; }
log() { printf '\033[1mwheelhouse:\033[0m %s\n' "$*"; }

command -v "$PY" >/dev/null 2>&1 && "$PY" -m pip --version >/dev/null 2>&1 \
  || die "no $PY with pip; fix: set PYTHON to an interpreter of the site's Python version (with pip)"
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# pip judges Requires-Python by this (a bare 3.9 means 3.9.0, which some releases exclude)
pyfull=$("$PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
[[ $PLATFORM =~ ^[a-z0-9_,]+$ ]] || die "PLATFORM=$PLATFORM: use wheel platform tags such as manylinux2014_x86_64"
check() { PYTHONPATH=$ROOT "$PY" -m kit.wheelcheck "$@"; }  # kit/wheelcheck.py: tags, and why a download failed
# a glibc 2.N system also runs older manylinux wheels: manylinux_2_N expands to every older tag
tags=$(check tags "$PLATFORM" 2>&1) || die "${tags#wheelcheck: error: }"
[[ $EXTRAS =~ ^[a-z,]*$ ]] || die "EXTRAS=$EXTRAS: use a comma list of report,convert,transfer,build,train,study"
if [ -e "$OUT" ] && [ ! -e "$OUT/$MARK" ]; then
  die "$OUT exists and was not made by this script; fix: move it away or set OUT=another/dir"
fi
part=$OUT.part
rm -rf "$part"  # our own leftover (the same name is never handed out)
mkdir -p "$part/horovod" "$CACHE/pip"
export PIP_CACHE_DIR=$CACHE/pip PIP_DISABLE_PIP_VERSION_CHECK=1

log "the kit's wheel"
"$PY" -m pip wheel -q --no-deps -w "$part" "$ROOT"
wheel=$(ls "$part"/secure_site_kit-*.whl)
"$PY" "$ROOT/kit/pins.py" constraints "$LOCK" > "$part/.constraints"

log "core + [$EXTRAS] for Python $pyver on $PLATFORM"
platforms=()
for p in $tags; do platforms+=(--platform "$p"); done
# pip's own failure is a bare ResolutionImpossible: on failure kit.wheelcheck names the pin without a
# wheel for this Python and platform, and the fix, in one line (of the packages pip's log names)
if ! "$PY" -m pip download --progress-bar off --only-binary=:all: "${platforms[@]}" --python-version "$pyfull" \
    --implementation cp -c "$part/.constraints" --find-links "$part" -d "$part" "$wheel[$EXTRAS]" > "$part/.pip.log" 2>&1; then
  why=$(check wheelhouse "$LOCK" --python "$pyver" --platform "$PLATFORM" --pip-log "$part/.pip.log" 2>&1) || true
  rm -rf "$part"
  echo "${why:-wheelhouse: pip download failed for Python $pyver on $PLATFORM; fix: run it again}" | tail -n1 >&2
  exit 1
fi
if [[ ,$EXTRAS, == *,train,* ]]; then  # --no-container sites build Horovod against their own MPI
  # the bare pin, marker cut (sed reads all of it: `head` would close the pipe on pins.py, EPIPE)
  "$PY" "$ROOT/kit/pins.py" constraints "$LOCK" --only horovod | sed -n '1s/ ;.*//p' > "$part/.horovod"
  "$PY" -m pip download -q --no-deps --no-binary :all: -d "$part/horovod" -r "$part/.horovod"
  cat > "$part/horovod/BUILD.sh" <<'RECIPE'
#!/bin/sh
# BUILD.sh VENV: Horovod from this pinned sdist against the site's MPI, for --no-container runs.
# First load the site's MPI, a C++17 compiler and cmake >= 3.13 (e.g. module load intel-mpi gcc cmake).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${1:?usage: BUILD.sh VENV}
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
HOROVOD_WITHOUT_GLOO=1 "$VENV/bin/pip" install --no-index --no-build-isolation --no-deps "$HERE"/horovod-*.tar.gz
"$VENV/bin/python" -c "import horovod.tensorflow as h; assert h.mpi_built(), 'built without MPI'"
RECIPE
fi
rm -f "$part/.constraints" "$part/.horovod" "$part/.pip.log"
rmdir "$part/horovod" 2>/dev/null || true  # only [train] has Horovod
"$PY" "$ROOT/kit/pins.py" verify "$LOCK" "$part" --exclude secure-site-kit
[ -z "$(ls "$part/horovod"/*.tar.gz 2>/dev/null)" ] || "$PY" "$ROOT/kit/pins.py" verify "$LOCK" "$part/horovod"

cp "$ROOT/scripts/wheelhouse-install.sh" "$part/install.sh"
chmod 0755 "$part/install.sh"
# install.sh asks them what an existing venv holds that the pin list replaced (tensorflow by tensorflow-cpu)
cp "$ROOT/kit/pins.py" "$LOCK" "$part/"
echo "$pyver" > "$part/PYTHON_VERSION"
echo "$PLATFORM" > "$part/PLATFORM"
tr ',' '\n' <<< "$EXTRAS" | grep . > "$part/EXTRAS" || true
touch "$part/$MARK"
(cd "$part" && find . -type f ! -name SHA256SUMS ! -name "$MARK" | sed 's|^\./||' | LC_ALL=C sort \
   | xargs -d '\n' sha256sum -- > SHA256SUMS)
if [ -e "$OUT" ]; then  # the previous wheelhouse (ours, checked above) goes only once the new one is whole
  mv "$OUT" "$OUT.old" && mv "$part" "$OUT" && rm -rf "$OUT.old"
else
  mv "$part" "$OUT"
fi
log "$OUT: $(ls "$OUT"/*.whl | wc -l) wheels; on the login node: sh install.sh [VENV] [EXTRAS]"
