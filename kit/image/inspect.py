"""``kit image inspect``: config, layers and the MPI libraries inside an image.

The MPI scan reads the *flattened* tree (whiteouts applied) and parses each candidate ELF
file's dynamic section for its SONAME, so SONAME != file name is handled.
"""
from __future__ import annotations

import io
import os
import posixpath
import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.construct import ConstructError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from kit.image.flatten import Flattener
from kit.image.sources import open_source_image

MPI_NAME = re.compile(r"(lib(?:mpi|mpich)(?:_[a-z0-9]+)?\.so)((?:\.\d+)*)")
MAX_ELF = 256 << 20


@dataclass
class MpiLibrary:
    """One MPI shared library file: where, linker name, SONAME, version, and its other names."""
    path: str
    linker_name: str
    soname: str | None
    version: str | None
    aliases: list[str] = field(default_factory=list)


def _soname(data: bytes) -> str | None:
    try:
        elf = ELFFile(io.BytesIO(data))
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_SONAME":
                        return tag.soname
    except (ELFError, ConstructError, ValueError, KeyError, IndexError, OverflowError,
            struct.error):
        return None  # pyelftools' ways of saying the file is no ELF it can read
    return None


def _is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


def find_mpi_libraries(image_tree_or_tar: str | os.PathLike, image: str | None = None) -> list[MpiLibrary]:
    """MPI libraries in an image: any input ``convert`` accepts (tree, tarball, archive, layout)."""
    flat = Flattener(open_source_image(Path(image_tree_or_tar), image))
    files: dict[str, MpiLibrary] = {}
    links: dict[str, str] = {}  # alias -> what it points at (path inside the image)
    for entry in flat.entries():
        info = entry.info
        base = posixpath.basename(info.name)
        match = MPI_NAME.fullmatch(base)
        if not match:
            continue
        if info.issym():
            links[info.name] = posixpath.normpath(
                posixpath.join(posixpath.dirname(info.name), info.linkname))
        elif info.islnk():
            links[info.name] = info.linkname
        elif info.isreg() and entry.data is not None and info.size <= MAX_ELF:
            data = entry.data.read()
            if _is_elf(data):
                files[info.name] = MpiLibrary("/" + info.name, match.group(1), _soname(data),
                                              match.group(2).lstrip(".") or None)
    for alias, target in sorted(links.items()):
        for _ in range(8):  # follow alias chains (libmpi.so -> libmpi.so.12 -> libmpi.so.12.3.0)
            if target in files or target not in links:
                break
            target = links[target]
        if target in files:
            files[target].aliases.append("/" + alias)
    return sorted(files.values(), key=lambda lib: lib.path)


def inspect_image(src: str | os.PathLike, image: str | None = None, with_mpi: bool = True) -> dict:
    """Config (env, entrypoint, labels, architecture), layers with sizes, MPI libraries."""
    img = open_source_image(Path(src), image)
    cfg = img.config.get("config") or {}
    return {
        "source": str(src), "kind": img.kind, "ref": img.ref,
        "manifest_digest": img.manifest_digest, "config_digest": img.config_digest,
        "architecture": img.config.get("architecture"), "os": img.config.get("os"),
        "env": cfg.get("Env") or [], "entrypoint": cfg.get("Entrypoint"), "cmd": cfg.get("Cmd"),
        "workdir": cfg.get("WorkingDir"), "labels": cfg.get("Labels") or {},
        "layers": [{"index": l.index, "digest": l.digest or l.diff_id, "media_type": l.media_type,
                    "size": l.blob.size} for l in img.layers],
        "mpi_libraries": [asdict(x) for x in find_mpi_libraries(src, image)] if with_mpi else None,
    }
