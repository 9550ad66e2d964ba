"""Give read access to an image's files as a directory, without running anything from it.

A directory image is used in place. A Charliecloud tarball or a SquashFS image (a SIF's partition
is one) has only the files MPI discovery needs extracted (the linker cache and paths mentioning
"mpi" or "fabric"), so a multi-GB image costs one read, not a full unpack. A source docker/OCI image
is flattened offline by kit.image's Flattener, keeping the same files (and the directories).
"""

from __future__ import annotations

import contextlib
import lzma
import os
import posixpath
import re
import stat
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kit.boundedrun import run_bounded
from kit.errors import KitError
from kit.excerpt import one_line
from kit.image_names import SIF, SQUASH
from kit.readfile import NotRegularFile, open_regular_fd
from kit.rootfs import Root, RootError, show
from kit.tarsafe import first_nonzero, forget_members, open_tar

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.zst")
WANTED_WORDS = ("mpi", "fabric", "psm")
SQUASH_TIMEOUT = 1800.0  # seconds for one unsquashfs run over a large image
# Older unsquashfs follows '..' names and writes through a symlink that shares its name with a
# directory in a crafted image (CVE-2021-40153, CVE-2021-41072).
MIN_UNSQUASHFS = (4, 5, 1)
MAX_LISTING = 64 << 20  # bytes of unsquashfs -lls kept: ~500,000 names
MAX_NOTES = 100  # skipped files named; a hostile image may have millions
HEAD = 64  # bytes read to tell a SquashFS or SIF file by its magic


def note(notes: list[str], text: str) -> None:
    """Keep a note of something skipped; past MAX_NOTES only say that more were."""
    if len(notes) < MAX_NOTES:
        notes.append(text)
    elif len(notes) == MAX_NOTES:
        notes.append("(more skipped files not listed)")


def wanted(relpath: str) -> bool:
    """Files worth extracting: the linker cache, dpkg status, the image's environment (ch-run
    imports it) and MPI-looking paths."""
    rel = relpath.lstrip("./")
    # TOP/ch/...
    if (
        rel in ("etc/ld.so.cache", "etc/ld.so.conf", "var/lib/dpkg/status", "ch/environment")
        or rel.startswith("etc/ld.so.conf.d/")
        or rel.partition("/")[2] == "ch/environment"
    ):
        return True
    return any(word in rel.lower() for word in WANTED_WORDS)


def kept(relpath: str, is_dir: bool, is_link: bool) -> bool:
    """What every extractor keeps: wanted files, every symlink (paths cross them, e.g.
    /lib -> usr/lib) and every directory (the pair's mount points are empty directories)."""
    return is_dir or is_link or wanted(relpath)


def _source_kind(image: Path) -> str | None:
    """docker-archive / OCI layout or archive, as kit.image tells them from a flat tree."""
    try:
        from kit.image.sources import detect
    except ImportError:  # kit image not installed: only Charliecloud images are read
        return None
    try:
        kind = detect(image)
    except KitError:
        return None
    return kind if kind in ("docker-archive", "oci-archive", "oci-dir") else None


def image_kind(image: Path) -> str:
    """dir, tar, squash, sif, or source (a docker/OCI image read through kit.image)."""
    name = image.name.lower()
    try:
        st = os.stat(image)
    except OSError as exc:
        raise KitError(
            f"cannot read the image ({exc.strerror})",
            fix="check the path and its permissions",
            where=str(image),
        ) from None
    if stat.S_ISDIR(st.st_mode):
        return "source" if _source_kind(image) else "dir"
    if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end: not opened
        raise KitError(
            f"{image}: not a directory or a regular file",
            fix="name an image directory, tarball or SquashFS file",
        )
    if name.endswith(TAR_SUFFIXES):
        return "source" if name.endswith(".tar") and _source_kind(image) else "tar"
    if name.endswith(SQUASH):
        return "squash"
    if name.endswith(SIF):
        return "sif"
    with open(image, "rb") as fh:
        head = fh.read(HEAD)
    if head[:4] == b"hsqs":
        return "squash"
    from kit.image.sif import looks_like_sif  # an unnamed file only

    if looks_like_sif(head):
        return "sif"
    raise KitError(
        f"{image}: not a directory, Charliecloud tarball ({', '.join(TAR_SUFFIXES)}), "
        f"SquashFS ({', '.join(SQUASH)}) or SIF ({', '.join(SIF)}) image",
        fix="give an image kit image convert wrote",
    )


def _safe_rel(name: str) -> str | None:
    rel = posixpath.normpath(name.lstrip("/"))
    if rel in (".", "") or rel.startswith("..") or "/../" in f"/{rel}/":
        return None
    return rel


def _extract_tar(image: Path, dest: Path, notes: list[str]) -> None:
    """Wanted members into ``dest``; paths are resolved and created inside it only (kit.rootfs),
    so no member or link in the tarball can make this write anywhere else."""
    with Root(dest) as tree:
        try:
            fh = os.fdopen(open_regular_fd(image), "rb")
        except NotRegularFile as exc:
            raise KitError(
                f"{image}: is {exc.kind}, not a regular file",
                fix="name an image directory, tarball or SquashFS file",
            ) from None
        except OSError as exc:
            raise KitError(
                f"cannot read the image ({exc.strerror})",
                fix="check the path and its permissions",
                where=str(image),
            ) from None
        try:
            with fh, open_tar(fh, compressed=True) as tar:
                while (member := tar.next()) is not None:
                    forget_members(tar)  # a million members cost no memory
                    rel = _safe_rel(member.name)
                    if rel is None or not kept(rel, member.isdir(), member.issym()):
                        continue
                    try:
                        _extract_member(tar, member, rel, tree)
                    except RootError as exc:
                        note(notes, f"skipped member {show(rel)} of {image.name}: {exc}")
                tar.fileobj.seek(tar.offset)
                bad = first_nonzero(iter(lambda: tar.fileobj.read(1 << 20), b""), tar.offset)
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise KitError(
                f"cannot read the tarball: {one_line(exc, tail=True) or '(no message)'}",
                fix="convert the image again (kit image convert SRC OUT.tar.gz)",
                where=str(image),
            ) from None
    if bad is not None:
        raise KitError(
            f"{image}: cannot read the tarball: "
            f"corrupt tar header at byte {tar.offset} (data at byte {bad} after what tar reads as the end)",
            fix="copy or convert the image again",
        )


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, rel: str, tree: Root) -> None:
    if member.isdir():
        tree.makedirs(rel, 0o755)
    elif member.issym():
        # read via Root only
        tree.symlink(rel, member.linkname, through_links=True, make_parents=0o755)
    elif member.isfile() and (src := tar.extractfile(member)) is not None:  # None: not a file
        # a later member wins
        out = tree.create(rel, through_links=True, make_parents=0o755, replace=True)
        with src, out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
    elif member.islnk():
        link = _safe_rel(member.linkname)
        target = tree.resolve(link) if link and tree.is_file(link) else None
        if target is not None:
            tree.hardlink(rel, target, through_links=True, make_parents=0o755)
    # devices and FIFOs are never made


def _extract_squash(
    image: Path, dest: Path, notes: list[str], timeout: float = SQUASH_TIMEOUT, offset: int = 0
) -> None:
    """unsquashfs (>= 4.5.1 refuses '..' names and writes through no link of the image)
    extracts the wanted files into our private ``dest``; directories are made here, inside it.
    ``offset``: where the SquashFS starts in the file (a SIF's partition)."""
    _require_safe_unsquashfs()
    at = ["-o", str(offset)] if offset else []
    try:
        listing = run_bounded(
            ["unsquashfs", *at, "-lls", "-no-progress", str(image)],
            timeout=timeout,
            limit=MAX_LISTING,
        )
    except subprocess.TimeoutExpired:
        raise KitError(
            f"unsquashfs took more than {timeout:.0f} s to list it",
            fix="check the image is on a file system that answers, then run again",
            where=str(image),
        ) from None
    if listing.returncode != 0:
        raise KitError(
            f"unsquashfs cannot read it: {one_line(listing.err, tail=True) or '(no message)'}",
            fix="convert the image again (kit image convert SRC OUT.sqfs)",
            where=str(image),
        )
    if listing.stdout_cut:
        raise KitError(
            f"{image}: unsquashfs lists more than {MAX_LISTING >> 20} MiB of names, "
            "far more than any image the kit reads",
            fix="give the image itself",
        )
    paths, dirs = [], []
    for line in listing.stdout.decode(errors="surrogateescape").splitlines():
        mode, _sep, rest = line.partition(" ")
        _before, sep, rel = rest.partition(" squashfs-root/")
        if not sep or not rel:
            continue
        is_link, is_dir = mode.startswith("l"), mode.startswith("d")
        rel = rel.split(" -> ")[0] if is_link else rel
        if _safe_rel(rel) != rel:
            note(notes, f"skipped {show(rel)} in {image.name}: a name unsquashfs lists ambiguously")
        elif is_dir:  # made here: listed to unsquashfs, a directory would come out whole
            dirs.append(rel)
        elif kept(rel, False, is_link):
            paths.append("/" + rel)
    with Root(dest) as tree:
        for rel in dirs:
            try:
                tree.makedirs(rel, 0o755)
            except RootError as exc:
                note(notes, f"skipped directory {show(rel)} of {image.name}: {exc}")
    if not paths:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".list", errors="surrogateescape") as lst:
        lst.write("\n".join(paths) + "\n")
        lst.flush()
        try:
            run = run_bounded(
                [
                    "unsquashfs",
                    *at,
                    "-no-progress",
                    "-no-xattrs",
                    "-no-wildcards",
                    "-ignore-errors",
                    "-f",
                    "-d",
                    str(dest),
                    "-ef",
                    lst.name,
                    str(image),
                ],
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise KitError(
                f"unsquashfs took more than {timeout:.0f} s to extract its MPI files",
                fix="check the image is on a file system that answers, then run again",
                where=str(image),
            ) from None
    if run.returncode == 2:  # non-fatal: some files could not be written (e.g. an overlong link)
        note(
            notes,
            f"unsquashfs skipped some files of {image.name}: "
            f"{one_line(run.err, tail=True) or '(no message)'}",
        )
    elif run.returncode != 0:
        raise KitError(
            f"unsquashfs failed: {one_line(run.err, tail=True) or '(no message)'}",
            fix="convert the image again (kit image convert SRC OUT.sqfs)",
            where=str(image),
        )


def _require_safe_unsquashfs() -> None:
    try:
        ran = run_bounded(["unsquashfs", "-version"], timeout=60, limit=64 << 10)
    except FileNotFoundError:
        raise KitError(
            "unsquashfs not found, needed to read a SquashFS image",
            fix="install squashfs-tools >= 4.5.1",
        ) from None
    except subprocess.TimeoutExpired:
        raise KitError(
            "unsquashfs -version did not answer within 60 s", fix="check the squashfs-tools install"
        ) from None
    match = re.search(r"version (\d+)\.(\d+)(?:\.(\d+))?", ran.out + ran.err)
    found = tuple(int(g or 0) for g in match.groups()) if match else None
    if found is None or found < MIN_UNSQUASHFS:
        shown = ".".join(map(str, found)) if found else "of unknown version"
        raise KitError(
            f"unsquashfs {shown} can write outside its destination for a crafted image",
            fix=f"install squashfs-tools >= {'.'.join(map(str, MIN_UNSQUASHFS))}",
        )


def _image_root(tree: Path) -> Path:
    """A tarball may hold the tree at top level or under one directory (ch-convert's style)."""
    with Root(tree) as root:
        if root.lstat("etc", follow_last=False) or root.lstat("usr", follow_last=False):
            return tree
    entries = list(tree.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return _image_root(entries[0])
    return tree


class WantedTree:
    """Writes the members MPI discovery needs (and every directory and symlink: paths cross
    them, e.g. /lib -> usr/lib) of a flattened image stream into `out`."""

    def __init__(self, out: Path):
        from kit.image.writers import DirWriter

        # a scratch directory (the caller's temporary one removes it): the tree is out/root
        out.mkdir()
        self.writer, self.written = DirWriter(out), set[str]()

    def offer(self, entry) -> bool:
        """Keep `entry` if wanted (its data is then consumed); True if kept."""
        info = entry.info
        if not kept(info.name, info.isdir(), info.issym()) or (
            info.islnk() and info.linkname not in self.written
        ):
            return False
        self.writer.add(entry)
        self.written.add(info.name)
        return True

    def path(self, name: str) -> Path:
        """Where a kept member is while the tree is being written."""
        return self.writer.root / name

    def commit(self) -> Path:
        return self.writer.finish()

    def abort(self) -> None:
        self.writer.abort()


def _extract_source(image: Path, dest: Path, ref: str | None = None) -> Path:
    """The wanted files of a docker/OCI image (``ref``: which, if it holds several), flattened by
    Charliecloud's rules (nothing run)."""
    from kit.image.flatten import Flattener
    from kit.image.sources import open_source_image

    tree = WantedTree(dest / "root")
    try:
        for entry in Flattener(open_source_image(image, ref)).entries():
            tree.offer(entry)
        return tree.commit()
    except BaseException:
        tree.abort()
        raise


@dataclass
class ImageTree:
    """A directory holding the image's files (all, or at least the MPI-related ones), and what
    extraction skipped."""

    root: Path
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def open_image_tree(image: str | os.PathLike, ref: str | None = None) -> Iterator[ImageTree]:
    """The image as a directory for the block's duration (extracted into a private temp dir);
    ``ref`` picks one image of a docker/OCI source that holds several."""
    image = Path(image)
    if not os.path.lexists(image):
        raise KitError("no such image", fix="check the path", where=str(image))
    kind = image_kind(image)
    if kind == "dir":
        yield ImageTree(image)
        return
    with tempfile.TemporaryDirectory(prefix="kit-mpi-") as tmp:
        if kind == "source":
            yield ImageTree(_extract_source(image, Path(tmp), ref))
            return
        notes: list[str] = []
        if kind == "sif":
            from kit.image.sif import squashfs_at  # a SIF's partition is a SquashFS

            _extract_squash(image, Path(tmp), notes, offset=squashfs_at(image))
        else:
            (_extract_tar if kind == "tar" else _extract_squash)(image, Path(tmp), notes)
        yield ImageTree(_image_root(Path(tmp)), notes)
