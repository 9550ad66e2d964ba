"""Builders for hostile MPI images: a real MPICH library from this machine in a small tree,
plus the links, FIFOs and names an attacker would add, as a directory, tarball or SquashFS."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import yaml

from kit.mpi.ldcache import NEW_ENTRY, NEW_HEADER, NEW_MAGIC
from tests.support.hostmpi import impi_site_dict
from tests.support.parts import require

SYSTEM_MPICH = Path("/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2")
LIB_DIR = "usr/lib/x86_64-linux-gnu"


def site_file(tmp_path: Path) -> Path:
    """An Intel MPI site whose library facts are given in the config (no MPI installed needed)."""
    site = impi_site_dict(tmp_path / "no-impi")
    site["host_mpi"].update(soname="libmpi.so.12", library_version="12.0.0")
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    return path


def mpich_tree(root: Path) -> Path:
    """etc/, the real libmpich.so.12.2.2 and its SONAME link: enough for `kit mpi pair`."""
    require(SYSTEM_MPICH.is_file(), "Debian MPICH not installed (libmpich12)")
    (root / "etc").mkdir(parents=True)
    (root / LIB_DIR).mkdir(parents=True)
    shutil.copy(SYSTEM_MPICH, root / LIB_DIR / SYSTEM_MPICH.name)
    (root / LIB_DIR / "libmpich.so.12").symlink_to(SYSTEM_MPICH.name)
    return root


def links(root: Path, table: dict[str, str]) -> None:
    for name, target in table.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)


def as_tar(tree: Path, out: Path, extra: list[tuple[tarfile.TarInfo, bytes | None]] = ()) -> Path:
    """The tree as a tarball (links stored as links), then ``extra`` members appended."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(tree, arcname=".")
        for info, data in extra:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return out


def as_squash(tree: Path, out: Path) -> Path:
    require(shutil.which("mksquashfs") is not None, "mksquashfs missing (squashfs-tools)")
    subprocess.run(
        [
            "mksquashfs",
            str(tree),
            str(out),
            "-noappend",
            "-no-xattrs",
            "-noI",
            "-noD",
            "-noF",
            "-quiet",
            "-no-progress",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


def snapshot(path: Path) -> dict[str, tuple[int, int, int]]:
    """Every name under ``path`` (links not followed) with mode, size and mtime (ns)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [".", *dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            out[os.path.relpath(full, path)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


# -- ld.so.cache --------------------------------------------------------------------------
def cache_bytes(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A glibc ld.so.cache (new format only, as ldconfig writes today) listing ``entries``."""
    strings, offsets = bytearray(), []
    table_end = NEW_HEADER.size + len(entries) * NEW_ENTRY.size
    for key, value in entries:
        offsets.append((table_end + len(strings), table_end + len(strings) + len(key) + 1))
        strings += key + b"\0" + value + b"\0"
    out = bytearray(NEW_HEADER.pack(NEW_MAGIC, len(entries), len(strings), 0, 0))
    for key_at, value_at in offsets:
        out += NEW_ENTRY.pack(0x0303, key_at, value_at, 0, 0)
    return bytes(out + strings)
