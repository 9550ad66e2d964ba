#!/usr/bin/env bash
# Optional: a real Apptainer for the tests, into the kit's cache (KIT_CACHE/apptainer), from
# Debian unstable's packages, nothing built. Debian 12 has no Apptainer; unstable's needs a
# newer glibc, so its own loader and libc go beside it (never into the system) and patchelf
# points the two binaries at them. The system's apt sources are left untouched.
# Never fails: when it cannot (no network, unstable moved on), it writes why, in one line, to
# KIT_CACHE/apptainer.unavailable, and the tests that need a real Apptainer skip with it.
# Idempotent: an Apptainer that runs is kept. Run by scripts/setup.sh; FORCE=1 redoes it.
set -uo pipefail
case ${XDG_CACHE_HOME:-} in /*) CACHE=${KIT_CACHE:-$XDG_CACHE_HOME/secure-site-kit} ;; *) CACHE=${KIT_CACHE:-$HOME/.cache/secure-site-kit} ;; esac  # kit/cachedir.py
DEST=$CACHE/apptainer
WHY=$CACHE/apptainer.unavailable
LIBDIR=usr/lib/kit-glibc  # the unstable loader and libraries, for Apptainer's binaries only
ARCHDIR=usr/lib/x86_64-linux-gnu

log() { printf '\033[1msetup:\033[0m %s\n' "$*"; }
unavailable() {
  mkdir -p "$CACHE"
  printf '%s\n' "$*" >"$WHY.tmp" && mv -f "$WHY.tmp" "$WHY"
  log "no real Apptainer (the tests that need one skip): $*"
  exit 0
}
works() { "$1/usr/bin/apptainer" --version >/dev/null 2>&1; }

mkdir -p "$CACHE" || exit 0
if [ "${FORCE:-0}" != 1 ] && works "$DEST"; then
  rm -f "$WHY"
  log "Apptainer present: $("$DEST/usr/bin/apptainer" --version) in $DEST"
  exit 0
fi
[ "$(uname -m)" = x86_64 ] || unavailable "this route takes Debian's amd64 packages; the machine is $(uname -m)"
for tool in apt-get dpkg-deb patchelf; do
  command -v "$tool" >/dev/null 2>&1 ||
    unavailable "$tool not found; fix: apt-get install patchelf (Debian 12), then rerun scripts/apptainer.sh"
done

# The machine's Debian mirror (deb822 or one-line sources), with the suite set to sid.
mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -m1 '/debian/\?$')
[ -n "$mirror" ] || mirror=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
  awk '{for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' | grep -m1 '/debian/\?$')
mirror=${mirror:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || unavailable "no $keyring to check Debian's signatures; fix: apt-get install debian-archive-keyring"

WORK=$(mktemp -d "$CACHE/.apptainer.XXXXXXXX") || unavailable "cannot create a directory in $CACHE"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial" "$WORK/debs" "$WORK/root"
echo "deb [signed-by=$keyring] $mirror sid main" >"$WORK/apt/sources.list"
APT=(apt-get -q -o "Dir::Etc::SourceList=$WORK/apt/sources.list" -o Dir::Etc::SourceParts=-
  -o "Dir::State::Lists=$WORK/apt/lists" -o "Dir::Cache=$WORK/apt/cache"
  -o Dir::Etc::Preferences=- -o Dir::Etc::PreferencesParts=- -o Acquire::Languages=none
  -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)"
  -o Acquire::Retries=1 -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30)
log "fetching Apptainer from Debian unstable ($mirror) into $DEST"
timeout 600 "${APT[@]}" update >"$WORK/log" 2>&1 ||
  unavailable "apt-get update of $mirror sid failed: $(tail -n1 "$WORK/log")"
(cd "$WORK/debs" && timeout 600 "${APT[@]}" download apptainer libc6) >>"$WORK/log" 2>&1 ||
  unavailable "apt-get download apptainer libc6 from sid failed: $(tail -n1 "$WORK/log")"
for deb in "$WORK"/debs/*.deb; do
  dpkg-deb -x "$deb" "$WORK/root" || unavailable "dpkg-deb -x $(basename "$deb") failed"
done
R=$WORK/root
[ -x "$R/usr/bin/apptainer" ] || unavailable "sid's apptainer package has no usr/bin/apptainer"

# 2. the loader and the few libraries the binaries load, beside them; both ELF binaries patched.
mkdir -p "$R/$LIBDIR"
for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 libresolv.so.2; do
  cp -L "$R/$ARCHDIR/$lib" "$R/$LIBDIR/" 2>/dev/null || unavailable "sid's libc6 has no $lib"
done
patched=0
while IFS= read -r elf; do
  patchelf --print-interpreter "$elf" >/dev/null 2>&1 || continue  # not dynamically linked
  patchelf --set-interpreter "$DEST/$LIBDIR/ld-linux-x86-64.so.2" --set-rpath "$DEST/$LIBDIR" "$elf" ||
    unavailable "patchelf failed on ${elf#"$R"/}"
  patched=$((patched + 1))
done < <(find "$R/usr/bin" "$R/$ARCHDIR/apptainer" -type f -perm -u+x)
[ "$patched" -ge 2 ] || unavailable "found $patched dynamically linked Apptainer binaries, expected 2"

# 3. relocation: the prefix is DEST/usr (apptainer) and DEST/usr/lib (the starter).
mkdir -p "$R/usr/etc" "$R/usr/var/lib/apptainer/mnt/session"
[ -d "$R/etc/apptainer" ] || unavailable "sid's apptainer package has no etc/apptainer"
mv "$R/etc/apptainer" "$R/usr/etc/apptainer"
ln -s ../etc "$R/usr/lib/etc"
ln -s ../var "$R/usr/lib/var"
# 4. root on some VMs lacks capabilities Apptainer's default set asks for: file-based instead.
conf=$R/usr/etc/apptainer/apptainer.conf
grep -q '^root default capabilities' "$conf" || unavailable "apptainer.conf has no 'root default capabilities' line"
sed -i 's/^root default capabilities = .*/root default capabilities = file/' "$conf"

# Into place: the new tree beside the old, then swapped; the old one goes.
rm -rf "$DEST.old"
[ ! -e "$DEST" ] || mv "$DEST" "$DEST.old"
mv "$R" "$DEST"
rm -rf "$DEST.old"
works "$DEST" || unavailable "the relocated apptainer does not run: $("$DEST/usr/bin/apptainer" --version 2>&1 | tail -n1)"
rm -f "$WHY"
log "Apptainer ready: $("$DEST/usr/bin/apptainer" --version) in $DEST"
