"""Write a stream of entries as .tar.gz, .tar, SquashFS or a directory, atomically.

Every writer builds its output under a temporary name in OUT's directory and renames it
into place on ``commit``; ``abort`` removes it, so a failed conversion leaves nothing.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import weakref
from pathlib import Path
from typing import IO

from isal import igzip_threaded
from zlib_ng import gzip_ng_threaded

from kit.errors import KitError
from kit.image.flatten import Entry
from kit.image_names import SQUASH, TAR, TAR_GZ
from kit.rootfs import Root

FORMATS = ("tar.gz", "tar", "sqfs", "dir")
CHUNK = 1 << 20


def format_for(out: Path, fmt: str | None) -> str:
    """The output format: --format if given, else OUT's suffix."""
    if fmt:
        if fmt not in FORMATS:
            raise KitError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return fmt
    name = out.name
    if name.endswith(TAR_GZ):
        return "tar.gz"
    if name.endswith(TAR):
        return "tar"
    if name.endswith(SQUASH):
        return "sqfs"
    if out.is_dir() or not out.suffix:
        return "dir"
    raise KitError(f"{out}: cannot tell the output format from the name; fix: use a name ending "
                   "in .tar.gz, .tar or .sqfs, or pass --format tar.gz|tar|sqfs|dir")


class _HashingFile:
    """A write-only file that hashes and counts what passes through it."""

    def __init__(self, fh: IO[bytes]):
        self.fh = fh
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


class _TellingFile:
    """Counts bytes written so tarfile's (cheaper) non-stream mode can ask tell()."""

    def __init__(self, fh):
        self.fh = fh
        self.pos = 0
        self.closed = False

    def write(self, data) -> int:
        self.pos += len(data)
        return self.fh.write(data)

    def tell(self) -> int:
        return self.pos


class Writer:
    """Base: a temporary sibling of OUT that becomes OUT on commit."""

    def __init__(self, out: Path):
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent))
        self.sha256: str | None = None
        self.size = 0

    def add(self, entry: Entry) -> None:
        raise NotImplementedError

    def _finish(self) -> Path:
        """Close the output; return the temporary path to rename to OUT."""
        raise NotImplementedError

    def commit(self) -> None:
        done = self._finish()
        if self.out.is_dir() and not self.out.is_symlink() and done.is_dir():
            shutil.rmtree(self.out)  # replacing an earlier directory output
        os.replace(done, self.out)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def abort(self) -> None:
        tar = getattr(self, "tar", None)
        if tar is not None:  # drop the tar stream's buffer: it must not flush into a closed file
            tar.closed = tar.fileobj.closed = True
        with contextlib.suppress(Exception):
            self._close_quietly()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _close_quietly(self) -> None:
        pass


class TarWriter(Writer):
    """Plain or gzip tar (ISA-L or zlib-ng, several threads), hashed while written."""

    def __init__(self, out: Path, gzip: bool, level: int, threads: int):
        super().__init__(out)
        self.path = self.tmp / "out"
        self.raw = open(self.path, "wb")
        self.hashed = _HashingFile(self.raw)
        # ISA-L is fastest (levels 0-3); zlib-ng at 4-9 is within ~1% of gzip -6's size.
        module = igzip_threaded if level <= 3 else gzip_ng_threaded
        self.gz = (module.open(self.hashed, "wb", compresslevel=level, threads=threads,
                               block_size=4 << 20) if gzip else None)
        self.tar = tarfile.open(fileobj=_TellingFile(self.gz or self.hashed), mode="w",
                                format=tarfile.PAX_FORMAT, copybufsize=CHUNK)

    def add(self, entry: Entry) -> None:
        self.tar.addfile(entry.info, entry.data)

    def _finish(self) -> Path:
        self.tar.close()
        if self.gz:
            self.gz.close()
        self.raw.flush()
        os.fsync(self.raw.fileno())
        self.raw.close()
        self.sha256, self.size = self.hashed.hash.hexdigest(), self.hashed.size
        os.chmod(self.path, 0o644)
        return self.path

    def _close_quietly(self) -> None:
        for closer in (self.gz, self.raw):
            if closer:
                with contextlib.suppress(Exception):
                    closer.close()


class SquashWriter(Writer):
    """SquashFS through ``mksquashfs -tar``: the tar streams into it, no unpacked tree."""

    def __init__(self, out: Path, level: int, threads: int):
        super().__init__(out)
        if not shutil.which("mksquashfs"):
            raise KitError("mksquashfs not found; fix: apt-get install squashfs-tools")
        self.path = self.tmp / "out.sqfs"
        self.errlog = open(self.tmp / "mksquashfs.log", "w+b")
        self.proc = subprocess.Popen(
            ["mksquashfs", "-", str(self.path), "-tar", "-noappend", "-quiet", "-no-progress",
             "-reproducible", "-mkfs-time", "0", "-comp", "gzip", "-Xcompression-level",
             str(level), "-processors", str(max(1, threads))],
            stdin=subprocess.PIPE, stdout=self.errlog, stderr=subprocess.STDOUT)
        self.tar = tarfile.open(fileobj=_TellingFile(self.proc.stdin), mode="w",
                                format=tarfile.PAX_FORMAT, copybufsize=CHUNK)

    def add(self, entry: Entry) -> None:
        try:
            self.tar.addfile(entry.info, entry.data)
        except BrokenPipeError:
            self._fail()

    def _fail(self) -> None:
        self.proc.wait()
        self.errlog.seek(0)
        raise KitError(f"mksquashfs failed (exit {self.proc.returncode}): "
                       f"{self.errlog.read().decode(errors='replace').strip()[-2000:]}")

    def _finish(self) -> Path:
        try:
            self.tar.close()
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        if self.proc.wait() != 0:
            self._fail()
        self.errlog.close()
        h = hashlib.sha256()
        with open(self.path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
        self.sha256, self.size = h.hexdigest(), self.path.stat().st_size
        os.chmod(self.path, 0o644)
        return self.path

    def _close_quietly(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.errlog.close()


class DirWriter(Writer):
    """A directory tree, written without following symlinks; modes/mtimes of dirs set last."""

    def __init__(self, out: Path):
        super().__init__(out)
        self.root = self.tmp / "root"
        self.root.mkdir(mode=0o755)
        self.dirs: list[tarfile.TarInfo] = []

    def add(self, entry: Entry) -> None:
        """Every name is created through directory fds, never following a symlink: a member
        under a link (or a hard link to one) is refused, whatever the stream says."""
        info = entry.info
        tree = _tree_of(self)
        if info.isdir():
            tree.mkdir(info.name, 0o700)
            self.dirs.append(info)
            return
        if info.issym():
            tree.symlink(info.name, info.linkname)
        elif info.islnk():
            tree.hardlink(info.name, info.linkname)
            return
        else:
            with tree.create(info.name) as fh:
                if entry.data is not None:
                    shutil.copyfileobj(entry.data, fh, CHUNK)
                os.fchmod(fh.fileno(), info.mode)
        tree.set_times(info.name, info.mtime)
        self.size += info.size

    def _finish(self) -> Path:
        for info in reversed(self.dirs):
            path = self.root / info.name
            os.chmod(path, info.mode)
            os.utime(path, (info.mtime, info.mtime))
        return self.root


_TREES: weakref.WeakKeyDictionary[DirWriter, Root] = weakref.WeakKeyDictionary()


def _tree_of(writer: DirWriter) -> Root:
    """The writer's root, opened once and closed when the writer is gone."""
    tree = _TREES.get(writer)
    if tree is None:
        tree = _TREES[writer] = Root(writer.root)
    return tree


def open_writer(out: Path, fmt: str, level: int, threads: int) -> Writer:
    if fmt == "tar.gz":
        return TarWriter(out, True, level, threads)
    if fmt == "tar":
        return TarWriter(out, False, level, threads)
    if fmt == "sqfs":
        return SquashWriter(out, level, threads)
    return DirWriter(out)
