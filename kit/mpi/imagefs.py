"""Give read access to an image's files as a directory, without running anything from it.

A directory image is used in place. A Charliecloud tarball or a SquashFS image has only the
files MPI discovery needs extracted (the linker cache and paths mentioning "mpi" or
"fabric"), so a multi-GB image costs one read, not a full unpack. A source docker/OCI image
is flattened offline by kit.image's Flattener, keeping the same files (and the directories).
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

from kit.errors import KitError
from kit.image_names import SQUASH

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.zst")
WANTED_WORDS = ("mpi", "fabric", "psm")


def wanted(relpath: str) -> bool:
    """Files worth extracting: the linker cache, dpkg status, the image's environment (ch-run
    imports it) and MPI-looking paths."""
    rel = relpath.lstrip("./")
    if rel in ("etc/ld.so.cache", "etc/ld.so.conf", "var/lib/dpkg/status", "ch/environment") \
            or rel.startswith("etc/ld.so.conf.d/") or rel.partition("/")[2] == "ch/environment":  # TOP/ch/...
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
    """dir, tar, squash, or source (a docker/OCI image read through kit.image)."""
    name = image.name.lower()
    if image.is_dir():
        return "source" if _source_kind(image) else "dir"
    if name.endswith(TAR_SUFFIXES):
        return "source" if name.endswith(".tar") and _source_kind(image) else "tar"
    if name.endswith(SQUASH):
        return "squash"
    with open(image, "rb") as fh:
        head = fh.read(4)
    if head == b"hsqs":
        return "squash"
    raise KitError(f"{image}: not a directory, Charliecloud tarball ({', '.join(TAR_SUFFIXES)}) "
                   f"or SquashFS ({', '.join(SQUASH)}) image")


def _safe_rel(name: str) -> str | None:
    rel = posixpath.normpath(name.lstrip("/"))
    if rel in (".", "") or rel.startswith("..") or "/../" in f"/{rel}/":
        return None
    return rel


def _extract_tar(image: Path, dest: Path) -> None:
    try:
        with tarfile.open(image, "r:*") as tar:
            for member in tar:
                rel = _safe_rel(member.name)
                if rel is None or not kept(rel, member.isdir(), member.issym()):
                    continue
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.issym():
                    with contextlib.suppress(FileExistsError):
                        os.symlink(member.linkname, target)  # resolved later inside the root only
                elif member.isfile():
                    with tar.extractfile(member) as src, open(target, "wb") as out:
                        while chunk := src.read(1 << 20):
                            out.write(chunk)
                elif member.islnk():
                    link = _safe_rel(member.linkname)
                    if link and (dest / link).is_file():
                        os.link(dest / link, target)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise KitError(f"{image}: cannot read the tarball: {exc}") from None


def _extract_squash(image: Path, dest: Path) -> None:
    listing = subprocess.run(["unsquashfs", "-lls", "-no-progress", str(image)],
                             capture_output=True, text=True)
    if listing.returncode != 0:
        raise KitError(f"{image}: unsquashfs cannot read it: {listing.stderr.strip()}")
    paths, dirs = [], []
    for line in listing.stdout.splitlines():
        mode, _sep, rest = line.partition(" ")
        _before, sep, rel = rest.partition(" squashfs-root/")
        if not sep or not rel:
            continue
        is_link, is_dir = mode.startswith("l"), mode.startswith("d")
        rel = rel.split(" -> ")[0] if is_link else rel
        if is_dir:  # made here: listed to unsquashfs, a directory would come out whole
            dirs.append(rel)
        elif kept(rel, False, is_link):
            paths.append("/" + rel)
    for rel in dirs:
        (dest / rel).mkdir(parents=True, exist_ok=True)
    if not paths:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".list") as lst:
        lst.write("\n".join(paths) + "\n")
        lst.flush()
        run = subprocess.run(["unsquashfs", "-no-progress", "-no-xattrs", "-f", "-d", str(dest),
                              "-ef", lst.name, str(image)], capture_output=True, text=True)
    if run.returncode != 0:
        raise KitError(f"{image}: unsquashfs failed: {run.stderr.strip()}")


def _image_root(tree: Path) -> Path:
    """A tarball may hold the tree at top level or under one directory (ch-convert's style)."""
    if (tree / "etc").is_dir() or (tree / "usr").is_dir():
        return tree
    entries = [p for p in tree.iterdir()]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return _image_root(entries[0]) if entries[0] != tree else tree
    return tree


class WantedTree:
    """Writes the members MPI discovery needs (and every directory and symlink: paths cross
    them, e.g. /lib -> usr/lib) of a flattened image stream into `out`."""

    def __init__(self, out: Path):
        from kit.image.writers import DirWriter

        out.mkdir()  # a scratch directory (the caller's temporary one removes it): the tree is out/root
        self.writer, self.written = DirWriter(out), set()

    def offer(self, entry) -> bool:
        """Keep `entry` if wanted (its data is then consumed); True if kept."""
        info = entry.info
        if not kept(info.name, info.isdir(), info.issym()) or (info.islnk() and info.linkname not in self.written):
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


def _extract_source(image: Path, dest: Path) -> Path:
    """The wanted files of a docker/OCI image, flattened by Charliecloud's rules (nothing run)."""
    from kit.image.flatten import Flattener
    from kit.image.sources import open_image

    tree = WantedTree(dest / "root")
    try:
        for entry in Flattener(open_image(image)).entries():
            tree.offer(entry)
        return tree.commit()
    except BaseException:
        tree.abort()
        raise


@contextlib.contextmanager
def image_root(image: str | os.PathLike) -> Iterator[Path]:
    """A directory holding (at least) the image's MPI-related files, for the block's duration."""
    image = Path(image)
    if not image.exists():
        raise KitError(f"{image}: no such image")
    kind = image_kind(image)
    if kind == "dir":
        yield image
        return
    with tempfile.TemporaryDirectory(prefix="kit-mpi-") as tmp:
        if kind == "source":
            yield _extract_source(image, Path(tmp))
            return
        (_extract_tar if kind == "tar" else _extract_squash)(image, Path(tmp))
        yield _image_root(Path(tmp))


def resolve_in_root(root: Path, path: str, hops: int = 40) -> Path | None:
    """Resolve an absolute in-image path, following symlinks inside ``root`` only."""
    parts = [p for p in path.split("/") if p]
    done: list[str] = []
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        candidate = root.joinpath(*done, part)
        if candidate.is_symlink():
            hops -= 1
            if hops < 0:
                return None
            target = os.readlink(candidate)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        if not candidate.exists():
            return None
        done.append(part)
    return root.joinpath(*done)
