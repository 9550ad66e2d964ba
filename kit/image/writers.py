"""Write a stream of entries as .tar.gz, .tar, SquashFS, SIF or a directory.

Every writer builds its output inside the run's work directory (kit.image.output, beside
OUT); ``finish`` returns the finished image there and kit.image.output puts it into place.
``abort`` stops a writer (and its mksquashfs) so that the work directory can go.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from kit.atomic import sync_filesystem
from kit.errors import KitError
from kit.image import sif
from kit.image.flatten import Entry
from kit.image.sources import Image
from kit.image.sqfs_root import set_root_mtime
from kit.image_names import SIF, SQUASH, TAR, TAR_GZ, sha256_file
from kit.interrupt import reap
from kit.rootfs import Root

FORMATS = ("tar.gz", "tar", "sqfs", "sif", "dir")
CHUNK = 1 << 20


def format_for(out: Path, fmt: str | None) -> str:
    """The output format: --format if given, else OUT's suffix."""
    if fmt:
        if fmt not in FORMATS:
            raise KitError(
                f"--format {fmt!r}: not a format kit writes",
                fix=f"choose one of {', '.join(FORMATS)}",
            )
        return fmt
    name = out.name
    if name.endswith(TAR_GZ):
        return "tar.gz"
    if name.endswith(TAR):
        return "tar"
    if name.endswith(SQUASH):
        return "sqfs"
    if name.endswith(SIF):
        return "sif"
    if out.is_dir() or not out.suffix:
        return "dir"
    raise KitError(
        f"{out}: cannot tell the output format from the name",
        fix="use a name ending in .tar.gz, .tar, .sqfs or .sif, "
        "or pass --format tar.gz|tar|sqfs|sif|dir",
    )


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
    """Base: builds the image inside WORK; ``finish`` returns its path there."""

    def __init__(self, work: Path):
        self.tmp = work
        self.sha256: str | None = None
        self.size = 0

    def add(self, entry: Entry) -> None:
        raise NotImplementedError

    def finish(self) -> Path:
        """Close the output durably; return its path in WORK."""
        raise NotImplementedError

    def abort(self) -> None:
        tar = getattr(self, "tar", None)
        if tar is not None:  # drop the tar stream's buffer: it must not flush into a closed file
            tar.closed = tar.fileobj.closed = True
        with contextlib.suppress(Exception):
            self._close_quietly()

    def _close_quietly(self) -> None:
        pass


class TarWriter(Writer):
    """Plain or gzip tar (ISA-L or zlib-ng, several threads), hashed while written."""

    def __init__(self, work: Path, gzip: bool, level: int, threads: int):
        super().__init__(work)
        self.path = self.tmp / "out"
        self.raw = open(self.path, "xb")
        self.hashed = _HashingFile(self.raw)
        from isal import igzip_threaded  # the [convert] extra: imported when used
        from zlib_ng import gzip_ng_threaded

        # ISA-L is fastest (levels 0-3); zlib-ng at 4-9 is within ~1% of gzip -6's size.
        module = igzip_threaded if level <= 3 else gzip_ng_threaded
        self.gz = (
            module.open(self.hashed, "wb", compresslevel=level, threads=threads, block_size=4 << 20)
            if gzip
            else None
        )
        self.tar = tarfile.TarFile(  # what tarfile.open(mode="w") makes; its stubs lack copybufsize
            # tarfile writes with write() and tell() only; its stubs ask a readable, seekable file
            fileobj=_TellingFile(self.gz or self.hashed),  # type: ignore[arg-type]
            mode="w",
            format=tarfile.PAX_FORMAT,
            copybufsize=CHUNK,
        )

    def add(self, entry: Entry) -> None:
        self.tar.addfile(entry.info, entry.data)

    def finish(self) -> Path:
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
    """SquashFS through ``mksquashfs -tar``: the tar streams into it, no unpacked tree.

    Byte-reproducible like the tar.gz: mksquashfs packs in a fixed order whatever
    ``-processors``, the superblock's time is 0, the root directory is root's with mode 0755
    and, once mksquashfs is done, gets the newest mtime of the image's entries (4.5.1 would
    stamp it with the time of the run; see kit.image.sqfs_root, which needs ``-noI``).

    mksquashfs runs in its own process group (a terminal's Ctrl-C reaches the kit, which kills
    it in ``abort``) and holds ``keep_fds`` (the run's lock on OUT): if the kit is killed, the
    pipe's end stops it, and until it has stopped no other run can take OUT's work directory.
    """

    FINISH_TIMEOUT = 3600  # seconds for mksquashfs to finish once the stream has ended

    def __init__(self, work: Path, level: int, threads: int, keep_fds: Sequence[int] = ()):
        super().__init__(work)
        if not shutil.which("mksquashfs"):
            raise KitError("mksquashfs not found", fix="apt-get install squashfs-tools")
        self.path = self.squash = self.tmp / "out.sqfs"
        self.newest = 0  # the root directory's mtime
        # not beside OUT: when that disk is full, the reason must fit
        self.errlog = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [
                "mksquashfs",
                "-",
                str(self.squash),
                "-tar",
                "-noappend",
                "-quiet",
                "-no-progress",
                "-reproducible",
                "-mkfs-time",
                "0",
                "-noI",
                "-all-root",
                "-root-mode",
                "0755",
                "-comp",
                "gzip",
                "-Xcompression-level",
                str(level),
                "-processors",
                str(max(1, threads)),
            ],
            stdin=subprocess.PIPE,
            stdout=self.errlog,
            stderr=subprocess.STDOUT,
            process_group=0,
            pass_fds=tuple(keep_fds),
        )
        if self.proc.stdin is None:  # stdin=PIPE always gives one: typeshed's Popen cannot tell
            raise RuntimeError("mksquashfs started without its input pipe")
        self.stdin = self.proc.stdin
        self.tar = tarfile.TarFile(
            fileobj=_TellingFile(self.stdin),  # type: ignore[arg-type]  # as in TarWriter
            mode="w",
            format=tarfile.PAX_FORMAT,
            copybufsize=CHUNK,
        )

    def add(self, entry: Entry) -> None:
        self.newest = max(self.newest, int(entry.info.mtime))
        try:
            self.tar.addfile(entry.info, entry.data)
        except BrokenPipeError:
            self._fail()

    def _fail(self) -> None:
        """mksquashfs stopped or failed: one line, its last words (the reason comes before the FATAL
        ERROR).
        """
        try:
            code = self.proc.wait(timeout=self.FINISH_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._close_quietly()
            raise KitError(
                f"mksquashfs did not finish within {self.FINISH_TIMEOUT} s",
                fix=f"check the disk holding {self.tmp.parent}",
            ) from None
        self.errlog.seek(0)
        lines = [
            line.strip() for line in self.errlog.read(1 << 20).decode(errors="replace").splitlines()
        ]
        last = "; ".join([line for line in lines if line][-3:])[-400:] or "no message"
        raise KitError(
            f"mksquashfs failed (exit {code}) writing into {self.tmp.parent}: {last}",
            fix="check the free space there, and squashfs-tools >= 4.5",
        )

    def finish(self) -> Path:
        self._squash()
        self.sha256, self.size = sha256_file(self.path, fsync=True), self.path.stat().st_size
        os.chmod(self.path, 0o644)
        return self.path

    def _squash(self) -> None:
        """End the stream; wait for mksquashfs; stamp the root (kit.image.sqfs_root)."""
        try:
            self.tar.close()
            self.stdin.close()
        except BrokenPipeError:
            pass
        try:
            code = self.proc.wait(timeout=self.FINISH_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            self._fail()
        self.errlog.close()
        set_root_mtime(self.squash, self.newest)

    def _close_quietly(self) -> None:
        self.proc.kill()
        reap(self.proc)
        self.errlog.close()


class SifWriter(SquashWriter):
    """A SIF (kit.image.sif): the SquashWriter's image as its primary system partition, behind
    a definition and labels taken from the source image's config. Deterministic like the
    SquashFS: the UUID comes from the content, every time is the image's newest mtime."""

    def __init__(
        self,
        work: Path,
        level: int,
        threads: int,
        keep_fds: Sequence[int] = (),
        image: Image | None = None,
    ):
        config = image.config if image else {}
        self.arch = sif.arch_code(config.get("architecture"))  # refused before any work
        self.definition = sif.definition_text(image.config_digest if image else None)
        self.labels = sif.labels_json(
            config, config.get("architecture"), image.config_digest if image else None
        )
        super().__init__(work, level, threads, keep_fds)
        self.path = self.tmp / "out.sif"

    def finish(self) -> Path:
        self._squash()
        with open(self.path, "xb") as raw:
            hashed = _HashingFile(raw)
            sif.write(
                hashed,  # type: ignore[arg-type]  # write() and flush() are all it uses
                self.squash,
                sha256_file(self.squash),
                definition=self.definition,
                labels=self.labels,
                arch=self.arch,
                mtime=self.newest,
            )
            raw.flush()
            os.fsync(raw.fileno())
        self.squash.unlink()
        self.sha256, self.size = hashed.hash.hexdigest(), hashed.size
        os.chmod(self.path, 0o755)  # as Apptainer leaves a SIF: its launch line runs it
        return self.path


class DirWriter(Writer):
    """A directory tree, written without following symlinks; modes/mtimes of dirs set last."""

    def __init__(self, work: Path):
        super().__init__(work)
        self.root = self.tmp / "root"
        self.root.mkdir(mode=0o755)
        self.tree = Root(self.root)
        self.dirs: list[tarfile.TarInfo] = []

    def add(self, entry: Entry) -> None:
        """Every name is created through directory fds, never following a symlink: a member
        under a link (or a hard link to one) is refused, whatever the stream says."""
        info = entry.info
        tree = self.tree
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

    def finish(self) -> Path:
        """Directory modes and mtimes, deepest first, each directory reached without following
        a symlink (a read-only directory is made so only once its entries are in)."""
        self.tree.close()
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for info in reversed(self.dirs):
                fd = _open_dir(root_fd, info.name)
                try:
                    os.chmod(fd, info.mode)
                    os.utime(fd, (info.mtime, info.mtime))
                finally:
                    os.close(fd)
            sync_filesystem(root_fd)  # the files and directories, not only the root's entries
        finally:
            os.close(root_fd)
        return self.root

    def _close_quietly(self) -> None:
        self.tree.close()


def _open_dir(root_fd: int, rel: str) -> int:
    """A directory of the tree by its path under the root, never through a symlink."""
    fd = os.dup(root_fd)
    for part in [p for p in rel.split("/") if p not in ("", ".")]:
        try:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def open_writer(
    work: Path,
    fmt: str,
    *,
    level: int,
    threads: int,
    keep_fds: Sequence[int] = (),
    image: Image | None = None,
) -> Writer:
    """The writer for FMT, building inside WORK; ``keep_fds`` stay open in its subprocess;
    ``image`` (the source's config) gives a SIF its architecture, definition and labels."""
    if fmt == "tar.gz":
        return TarWriter(work, True, level, threads)
    if fmt == "tar":
        return TarWriter(work, False, level, threads)
    if fmt == "sqfs":
        return SquashWriter(work, level, threads, keep_fds)
    if fmt == "sif":
        return SifWriter(work, level, threads, keep_fds, image)
    return DirWriter(work)
