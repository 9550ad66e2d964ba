"""`kit transfer bundle|verify`: removable-media bundles that check themselves on the inside.

A bundle directory holds the images (tarballs, SquashFS, SIF) and their sibling files, with
`--with-kit` the kit's own wheelhouse under `kit/`, `MANIFEST` (one line `<sha256> <size>
<name>` per file, read by both checkers), `MANIFEST.json` (the same for tools), `verify.sh`
(POSIX sh + coreutils only), `verify.py` (python3 fallback, the very module
kit.transfer.verify) and `SHA256SUMS` over every other file, so a site with nothing of ours
checks it with `sha256sum -c SHA256SUMS`. The bundle is built in a hidden temp directory beside
the target and renamed into place whole, so a half-written bundle never has the final name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable

from kit.atomic import fsync_dir, fsync_path, remove_tree, rename_noreplace
from kit.errors import KitError
from kit.image_names import SHA256, sha256_file
from kit.progress import counter
from kit.transfer import verify as checker
from kit.transfer.local_image import open_local_image, recorded_sha256
from kit.transfer.sums import SUMS, format_sums
from kit.transfer.wheelhouse import FIX, SUBDIR, Wheelhouse, open_wheelhouse

VERIFY_SH = r"""#!/bin/sh
# Check this bundle with POSIX sh + coreutils (wc, sha256sum, cut, tr, find, awk): names every
# missing, truncated or altered file listed in MANIFEST and every file it does not list.
# Exit 0 all good, 1 problems.
# Usage: sh verify.sh [BUNDLE_DIR]
set -u
dir=${1:-$(dirname "$0")}
cd "$dir" || { echo "verify: cannot enter $dir" >&2; exit 2; }
# a FIFO or a link (to /dev/zero, off the medium) is no manifest: refused before it is read
{ [ -f MANIFEST ] && [ ! -L MANIFEST ]; } ||
  { echo "verify: $dir/MANIFEST is missing or not a file: not a kit transfer bundle?" >&2; exit 2; }
[ "$(wc -c < MANIFEST)" -le 1048576 ] ||
  { echo "verify: $dir/MANIFEST is too large: not a kit transfer bundle" >&2; exit 2; }
bad=0
n=0
while read -r sum size name; do
  n=$((n + 1))
  # a plain relative path (kit/x.whl): no dot-led part, no empty part, nothing but [A-Za-z0-9._+-/]
  case "$name" in [!A-Za-z0-9]*|*/[!A-Za-z0-9]*|*/|*[!A-Za-z0-9._+/-]*)
    echo "verify: MANIFEST line $n is malformed" >&2; exit 2 ;; esac
  up=$name linked=
  while [ "${up%/*}" != "$up" ]; do up=${up%/*}; [ -L "$up" ] && linked=$up; done
  if [ -n "$linked" ] || [ ! -f "$name" ] || [ -L "$name" ]; then
    echo "MISSING: $name (not in the bundle)"; bad=$((bad + 1)); continue
  fi
  actual=$(wc -c < "$name" | tr -d ' ')
  if [ "$actual" -lt "$size" ]; then
    echo "TRUNCATED: $name ($actual bytes, manifest says $size)"; bad=$((bad + 1)); continue
  fi
  if [ "$actual" -gt "$size" ]; then
    echo "OVERSIZED: $name ($actual bytes, manifest says $size)"; bad=$((bad + 1)); continue
  fi
  got=$(sha256sum < "$name" | cut -d ' ' -f 1)
  if [ "$got" != "$sum" ]; then
    echo "ALTERED: $name (sha256 $got, manifest says $sum)"; bad=$((bad + 1))
  fi
done < MANIFEST
# every entry MANIFEST does not list (an extra script beside the images) is a problem too: the
# topmost one of each unlisted tree, walked only where listed names lead (find follows no link)
unlisted=$(find . ! -name . -print 2>/dev/null | head -n 100000 | awk '
  BEGIN { ok["MANIFEST"]; ok["MANIFEST.json"]; ok["SHA256SUMS"]; ok["verify.py"]; ok["verify.sh"] }
  FNR == NR { ok[$3]; n = split($3, part, "/"); d = part[1]
              for (i = 1; i < n; i++) { dirs[d]; d = d "/" part[i + 1] }; next }
  { sub(/^\.\//, ""); if (($0 in ok) || ($0 in dirs)) next
    up = $0; sub(/\/[^\/]*$/, "", up); if (up == $0 || (up in dirs)) print }' MANIFEST -)
if [ -n "$unlisted" ]; then
  printf '%s\n' "$unlisted" | sed 's/^/UNLISTED: /; s/$/ (the manifest does not list it)/'
  bad=$((bad + $(printf '%s\n' "$unlisted" | wc -l)))
fi
echo "$dir: $n files, $bad problem(s)"
[ "$bad" -eq 0 ]
"""


@dataclass
class VerifyReport:
    directory: Path
    files: int
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (name, kind, detail)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        out = [f"{kind.upper()}: {name} ({detail})" for name, kind, detail in self.problems]
        return out + [f"{self.directory}: {self.files} files, {len(self.problems)} problem(s)"]


def _copy(fin: BinaryIO, dst: Path, progress: Callable[[int], None] | None) -> str:
    """Copy with fsync, hashing the bytes on the way (one read of the source). The copy's
    pages are then dropped from the cache, so a verify that follows reads the medium itself."""
    h = hashlib.sha256()
    with fin, open(dst, "xb") as fout:
        while data := fin.read(8 << 20):
            h.update(data)
            fout.write(data)
            if progress:
                progress(len(data))
        fout.flush()
        os.fsync(fout.fileno())
        os.posix_fadvise(fout.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return h.hexdigest()


def _copy_wheelhouse(
    wh: Wheelhouse, tmp: Path, tick: Callable[[int], None] | None
) -> list[tuple[str, int, str]]:
    """The wheelhouse into tmp/kit/, each file checked against its SHA256SUMS line as it is
    copied.
    """
    entries = []
    for sha, name, _ in wh.files:
        dst = tmp / SUBDIR / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        got = _copy(os.fdopen(wh.open(name), "rb"), dst, tick)
        size = dst.stat().st_size  # our own copy: the bytes that were hashed
        if sha and got != sha:
            raise KitError(
                f"{wh.path / name} does not match {wh.path / SUMS} (sha256 {got}, listed {sha}): "
                "the wheelhouse is damaged",
                fix=f"{FIX}",
            )
        entries.append((got, size, f"{SUBDIR}/{name}"))
    return entries


def bundle(
    images: list[Path],
    out_dir: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    kit_wheelhouse: Path | None = None,
) -> Path:
    """Write a self-checking bundle of `images` (+ siblings) as the new directory `out_dir`, with
    the wheelhouse at `kit_wheelhouse` under kit/ if given; `progress(done, total)` follows the
    bytes copied."""
    out_dir = Path(out_dir)
    if not images:
        raise KitError("no images given", fix="name them: kit transfer bundle IMAGE... --dir DIR")
    if out_dir.exists():
        raise KitError(
            "already exists; a bundle is written whole into a new directory",
            fix="choose another --dir, or remove that one",
            where=str(out_dir),
        )
    imgs = [open_local_image(p) for p in images]
    sources = [p for img in imgs for p in (img.path, *img.siblings)]
    seen: dict[str, Path] = {}
    for p in sources:
        if p.name in seen and seen[p.name] != p:
            raise KitError(
                f"{p} and {seen[p.name]} have the same name; a bundle is flat",
                fix="rename one of them, or write two bundles",
            )
        seen[p.name] = p
    wh = open_wheelhouse(kit_wheelhouse) if kit_wheelhouse is not None else None
    total = sum(p.stat().st_size for p in seen.values()) + sum(
        size for *_, size in (wh.files if wh else [])
    )
    tick = counter(total, progress)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        entries = []
        copied_names: set[str] = set()
        for img in imgs:
            for src in dict.fromkeys((img.path, *img.siblings)):
                if src.name in copied_names:  # a sidecar two images share (same stem) goes in once
                    continue
                copied_names.add(src.name)
                entries.append(
                    (_copy(open(src, "rb"), tmp / src.name, tick), src.stat().st_size, src.name)
                )
            recorded = recorded_sha256(img)
            copied = next(sha for sha, _, name in entries if name == img.path.name)
            if recorded and recorded != copied:
                raise KitError(
                    f"does not match {img.sha_file} (sha256 {copied}, recorded {recorded}): "
                    "the image is damaged or changed",
                    fix=f"re-run kit image convert to write the image and its {SHA256} again",
                    where=str(img.path),
                )
        if wh:
            entries += _copy_wheelhouse(wh, tmp, tick)
        shutil.copyfile(checker.__file__, tmp / "verify.py")
        (tmp / "verify.sh").write_text(VERIFY_SH)
        os.chmod(tmp / "verify.sh", 0o755)
        os.chmod(tmp / "verify.py", 0o755)
        (tmp / "MANIFEST.json").write_text(
            json.dumps(
                {
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "files": [{"name": n, "size": s, "sha256": h} for h, s, n in entries],
                },
                indent=2,
            )
            + "\n"
        )
        (tmp / checker.MANIFEST).write_text("".join(f"{h} {s} {n}\n" for h, s, n in entries))
        extra = ["verify.py", "verify.sh", "MANIFEST.json", checker.MANIFEST]
        (tmp / SUMS).write_text(
            format_sums(
                [(h, n) for h, _, n in entries] + [(sha256_file(tmp / n), n) for n in extra]
            )
        )
        os.chmod(tmp, 0o755)
        # a medium pulled right after the rename holds what the sums say: the files written here
        # and every directory entry reach it before the bundle has its name
        subdirs = [d for d in (tmp / SUBDIR).rglob("*") if d.is_dir()] + (
            [tmp / SUBDIR] if wh else []
        )
        for path in [*(tmp / n for n in [*extra, SUMS]), *subdirs, tmp]:
            fsync_path(path)
        _rename_new(tmp, out_dir)
    except BaseException:
        remove_tree(tmp)  # mkdtemp's: ours
        raise
    return out_dir


def _rename_new(tmp: Path, out_dir: Path) -> None:
    """TMP becomes OUT only if nothing is there: rename(2) would replace a directory someone made
    at OUT meanwhile, if empty."""
    fd = os.open(tmp.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        rename_noreplace(fd, tmp.name, out_dir.name)
        fsync_dir(fd)
    except FileExistsError:
        raise KitError(
            "appeared while the bundle was written; it is left alone",
            fix="choose another --dir, or remove that one and run the same command again",
            where=str(out_dir),
        ) from None
    finally:
        os.close(fd)


def verify_bundle(
    directory: Path, progress: Callable[[int, int], None] | None = None
) -> VerifyReport:
    """Check every file the bundle's MANIFEST lists, and that it holds nothing else; problems name
    the file and what is wrong.
    `progress(done, total)` follows the bytes hashed."""
    directory = Path(directory)
    try:
        entries = checker.read_manifest(str(directory))
        problems = checker.check(
            str(directory), counter(sum(size for _, size, _ in entries), progress)
        )
    except checker.ManifestError as exc:
        raise KitError(
            str(exc),
            fix="give the directory kit transfer bundle wrote; "
            f"if {directory} is one, copy it again from its medium",
        ) from exc
    return VerifyReport(directory, len(entries), problems)
