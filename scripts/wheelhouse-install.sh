#!/bin/sh
# install.sh [VENV] [EXTRAS]: installs secure-site-kit from this wheelhouse alone, on a login
# node with no root, no internet and no compiler: checks every file against SHA256SUMS, makes
# a venv with the site's Python (the one the wheelhouse was made for) and pip-installs from
# this directory only. VENV defaults to ~/.local/share/secure-site-kit/venv; EXTRAS is a
# comma list (report, convert, transfer, build, train) of those the wheelhouse was made with.
# PYTHON picks the interpreter (default: python3).
#
# Everything is checked before a venv is made, each failure one line and exit 1: SHA256SUMS
# (plain names of regular files only: a FIFO or device named there is refused, never opened;
# every file beside it listed, so pip sees no unverified wheel), the extras (exact names), VENV
# (a new or empty directory or an existing venv; never a link, a file, or a directory holding
# anything else, whose files the venv would overwrite) and the Python version.
set -eu
# One line whatever a path holds: control characters (a newline in VENV) are shown as '?'.
die() { printf 'install.sh: %s\n' "$(printf '%s' "$*" | tr '[:cntrl:]' '?')" >&2; exit 1; }
HERE=$(CDPATH='' cd -P -- "$(dirname -- "$0")" && pwd -P) || die "cannot enter the directory of $0"
VENV=${1:-$HOME/.local/share/secure-site-kit/venv}
EXTRAS=${2:-}
PY=${PYTHON:-python3}
SUMS=$HERE/SHA256SUMS
MARK=.secure-site-kit-wheelhouse  # make wheelhouse's mark (not listed in SHA256SUMS)
MAX_SUMS=1048576                  # bytes of SHA256SUMS: a wheelhouse lists a few hundred files
AGAIN="fix: copy the whole wheelhouse directory again"
# This directory only: no pip.conf index or find-links of the login node takes part.
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_REQUIRE_VIRTUALENV 2>/dev/null || true
set -f  # no word below is a glob pattern
NL='
'

# What is at $1, in words ("" for a regular file that is not a link).
kind() {
  if [ -L "$1" ]; then echo "a symbolic link"
  elif [ -p "$1" ]; then echo "a FIFO"
  elif [ -b "$1" ] || [ -c "$1" ]; then echo "a device"
  elif [ -S "$1" ]; then echo "a socket"
  elif [ -d "$1" ]; then echo "a directory"
  elif [ ! -e "$1" ]; then echo "missing"
  elif [ ! -f "$1" ]; then echo "not a regular file"
  fi
}

# -- SHA256SUMS: every line a sum and a plain name of a regular file, before sha256sum opens one --
what=$(kind "$SUMS")
[ -z "$what" ] || die "$SUMS is $what, not the wheelhouse's list of sums; $AGAIN"
[ "$(head -c $((MAX_SUMS + 1)) "$SUMS" | wc -c)" -le "$MAX_SUMS" ] \
  || die "$SUMS is larger than $MAX_SUMS bytes, not one make wheelhouse wrote; $AGAIN"
names=$NL
n=0
while IFS= read -r line || [ -n "$line" ]; do
  n=$((n + 1))
  sum=${line%%  *} name=${line#*  }
  case $sum in *[!0-9a-f]*) sum= ;; esac
  # a plain relative name, at most one directory deep (horovod/x.tar.gz): nothing sha256sum escapes
  case $name in ''|[!A-Za-z0-9]*|*/[!A-Za-z0-9]*|*/|*/*/*|*[!A-Za-z0-9._+/-]*) name= ;; esac
  [ "${#sum}" -eq 64 ] && [ -n "$name" ] \
    || die "$SUMS line $n: expected '<sha256>  <name>' with a plain file name; $AGAIN"
  case $name in */*)
    dir=$(kind "$HERE/${name%/*}")
    [ "$dir" = "a directory" ] || die "$SUMS line $n: $HERE/${name%/*} is ${dir:-a file}, not a directory; $AGAIN" ;;
  esac
  what=$(kind "$HERE/$name")
  [ -z "$what" ] || die "$SUMS line $n: $HERE/$name is $what, not a regular file; $AGAIN"
  names=$names$name$NL
done < "$SUMS"
for need in PYTHON_VERSION EXTRAS pins.py constraints.txt; do
  case $names in *"$NL$need$NL"*) ;; *) die "$SUMS does not list $need; $AGAIN" ;; esac
done
case $names in *"${NL}secure_site_kit-"*".whl$NL"*) ;; *) die "$SUMS lists no secure_site_kit-*.whl; $AGAIN" ;; esac
# pip takes every archive in this directory: one SHA256SUMS does not vouch for is refused
set +f
for path in "$HERE"/* "$HERE"/.[!.]* "$HERE"/..?*; do
  [ -e "$path" ] || [ -L "$path" ] || continue
  entry=${path##*/}
  case $entry in SHA256SUMS|"$MARK") continue ;; *[[:cntrl:]]*) entry= ;; esac  # no name spans two lines
  [ -z "$entry" ] || case $names in *"$NL$entry$NL"*|*"$NL$entry/"*) continue ;; esac
  die "$path is not listed in SHA256SUMS (pip would install it unverified); fix: move it out of $HERE"
done
set -f
if ! report=$(cd "$HERE" && sha256sum --check --quiet --strict SHA256SUMS 2>&1); then
  bad=$(printf '%s\n' "$report" | sed -n 's/: FAILED.*//p' | head -n1)
  die "$HERE/${bad:-SHA256SUMS} does not match SHA256SUMS (a damaged or partial copy); fix: copy the wheelhouse again"
fi

# -- extras: exact names the wheelhouse was made with (no pattern) ---------------------------------
have_extras=$(tr '\n' ' ' < "$HERE/EXTRAS" | head -c 200)
case $EXTRAS in *[!a-z,]*)
  die "EXTRAS '$EXTRAS': give a comma list of the wheelhouse's extras (it has: ${have_extras:-none}); fix: e.g. report" ;;
esac
IFS=,
for extra in $EXTRAS; do
  [ -z "$extra" ] || grep -qxF -- "$extra" "$HERE/EXTRAS" \
    || die "extra '$extra' is not in this wheelhouse (it has: ${have_extras:-none}); fix: make the wheelhouse with EXTRAS=$EXTRAS"
done
unset IFS

# -- VENV: a new or empty directory, or an existing venv; nothing else is written into ------------
case $VENV in *[[:cntrl:]]*) die "VENV '$VENV' holds a control character (a newline?); fix: give a plain path" ;; esac
case $VENV in /*) ;; *) VENV=$(pwd -P)/$VENV ;; esac  # also makes a VENV of '-x' no option
while [ "$VENV" != / ] && [ "${VENV%/}" != "$VENV" ]; do VENV=${VENV%/}; done  # /a/b/ -> /a/b: no link followed
case $VENV/ in "$HERE"/*) die "VENV $VENV is inside the wheelhouse $HERE; fix: give a directory outside it" ;; esac
fresh=yes
if [ -L "$VENV" ]; then
  die "VENV $VENV is a symbolic link; fix: give the directory it points to, or a new path"
elif [ -d "$VENV" ]; then
  if [ -z "$(kind "$VENV/pyvenv.cfg")" ] && [ -x "$VENV/bin/python" ]; then
    fresh=  # an existing venv: pip installs into it
  elif [ "$(ls -A -- "$VENV" | head -c 1 | wc -c)" -ne 0 ]; then  # a first name may start with a newline
    die "VENV $VENV is a directory that is not a venv (no pyvenv.cfg): a venv made there would overwrite its files; fix: give a new directory or an existing venv"
  fi
elif [ -e "$VENV" ]; then
  die "VENV $VENV is $(kind "$VENV"), not a directory; fix: give a new directory or an existing venv"
fi

# -- Python: the version the wheelhouse was made for ----------------------------------------------
want=$(head -c 16 "$HERE/PYTHON_VERSION" | head -n 1)
case $want in [0-9]*.[0-9]*) ;; *) die "$HERE/PYTHON_VERSION: expected a version such as 3.11; $AGAIN" ;; esac
command -v "$PY" >/dev/null 2>&1 || die "no $PY on PATH; fix: load a Python $want (e.g. module load python) or set PYTHON=/path/to/python$want"
have=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$have" = "$want" ] || die "$PY is Python $have but this wheelhouse is for Python $want; fix: set PYTHON=/path/to/python$want, or make the wheelhouse with PYTHON=python$have"
if [ -n "$fresh" ]; then
  "$PY" -m venv "$VENV" || die "$PY -m venv $VENV failed; fix: use a Python with the venv module (Debian: python3-venv)"
fi
# A venv an earlier wheelhouse made may hold a distribution the pin list has since replaced by
# another that installs the same files (tensorflow by tensorflow-cpu): where this wheelhouse
# brings the replacement, the old one goes first (removed later, it would delete files of its
# replacement), then the replacement is installed whole.
replaced=$("$VENV/bin/python" "$HERE/pins.py" replaced "$HERE/constraints.txt") \
  || die "could not read $HERE/constraints.txt (see above); fix: copy the wheelhouse again"
set +f
printf '%s\n' "$replaced" | while read -r old new; do
  [ -n "$new" ] || continue
  ls "$HERE/$(echo "$new" | tr - _)"-*.whl >/dev/null 2>&1 || continue
  "$VENV/bin/python" -m pip uninstall --quiet -y "$old" || die "pip could not uninstall $old from $VENV (see above)"
  "$VENV/bin/python" -m pip install --quiet --no-index --find-links "$HERE" --no-deps --force-reinstall "$new" \
    || die "pip could not install $new from $HERE (see above)"
done
set -f
"$VENV/bin/python" -m pip install --quiet --no-index --find-links "$HERE" \
  "secure-site-kit${EXTRAS:+[$EXTRAS]}" || die "pip could not install from $HERE (see above)"
if [ -f "$HERE/horovod/BUILD.sh" ] && echo ",$EXTRAS," | grep -q ',train,'; then
  echo "install.sh: for --no-container runs build Horovod against the site's MPI: sh $HERE/horovod/BUILD.sh $VENV"
fi
echo "install.sh: installed; run $VENV/bin/kit (add $VENV/bin to PATH)"
