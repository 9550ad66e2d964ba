"""``kit image inspect``: config, layers and the MPI libraries inside an image.

The MPI is kit.mpi's answer (the image's linker cache, else its standard library directories;
ELF headers read, nothing executed): the libraries `kit mpi pair` decides from, so the two
commands cannot disagree about an image's MPI. It joins kit.image's reading of the image (config,
layers) with kit.mpi's reading of its MPI, so it sits in kit.mpi, the layer above kit.image.
"""

from __future__ import annotations

import os
from pathlib import Path

from kit.image.sources import open_source_image


def mpi_libraries(src: str | os.PathLike, image: str | None = None) -> list[dict]:
    """The image's MPI library files (whiteouts applied), each with the names it is found under."""
    from kit.mpi.discover import find_image_mpi  # the ELF reader: only when the MPI is asked for

    by_file: dict[str, dict] = {}
    for lib in find_image_mpi(src, image).libraries:
        entry = by_file.setdefault(
            lib.real_path,
            {
                "path": lib.real_path,
                "names": [],
                "soname": lib.soname,
                "version": lib.file_version,
                "vendor": lib.vendor,
                "mpi_version": lib.mpi_version,
            },
        )
        entry["names"].append(lib.path)
    return sorted(by_file.values(), key=lambda e: e["path"])


def inspect_image(src: str | os.PathLike, image: str | None = None, with_mpi: bool = True) -> dict:
    """Config (env, entrypoint, labels, architecture), layers with sizes, MPI libraries."""
    img = open_source_image(Path(src), image)
    cfg = img.config.get("config") or {}
    return {
        "source": str(src),
        "kind": img.kind,
        "ref": img.ref,
        "manifest_digest": img.manifest_digest,
        "config_digest": img.config_digest,
        "architecture": img.config.get("architecture"),
        "os": img.config.get("os"),
        "env": cfg.get("Env") or [],
        "entrypoint": cfg.get("Entrypoint"),
        "cmd": cfg.get("Cmd"),
        "workdir": cfg.get("WorkingDir"),
        "labels": cfg.get("Labels") or {},
        "layers": [
            {
                "index": l.index,
                "digest": l.digest or l.diff_id,
                "media_type": l.media_type,
                "size": l.blob.size,
            }
            for l in img.layers
        ],
        "mpi_libraries": mpi_libraries(src, image) if with_mpi else None,
    }
