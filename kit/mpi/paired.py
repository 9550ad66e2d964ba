"""Convert an image for a site: decide the MPI pair first, then convert with everything the
pair binds onto already inside, and write OUT.pair.yaml beside OUT.

Pairing first means an image that cannot run at the site is refused before minutes of
conversion; creating the mount points and alias links during conversion is the only moment
they can be added to a read-only image (SquashFS, or a tarball unpacked by ch-convert).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from kit.image.convert import ConversionReport, convert
from kit.mpi.pair import Pair, make_pair, pair_path, write_pair
from kit.site import Site


@dataclass
class PairedConversion:
    report: ConversionReport
    pair: Pair
    pair_file: Path | None  # None in a dry run


def convert_paired(src: str | os.PathLike, out: str | os.PathLike, site: Site | str | os.PathLike, *,
                   mode: str = "full", mount_points: Sequence[str] = (), dry_run: bool = False,
                   **options: Any) -> PairedConversion:
    """kit.image.convert(SRC, OUT) plus the pair's mount points and links; then OUT.pair.yaml.

    `options` go to kit.image.convert (fmt, image, level, limits, progress, threads).
    Raises KitError (nothing written) if the image's MPI cannot pair with the site's.
    """
    pair = make_pair(site, src, mode, select=options.get("image"))
    report = convert(src, out, mount_points=[*mount_points, *pair.mount_points], links=pair.links,
                     dry_run=dry_run, **options)
    pair.image, pair.missing = str(out), []  # convert created each one or raised
    if dry_run:
        return PairedConversion(report, pair, None)
    return PairedConversion(report, pair, write_pair(pair, pair_path(out)))
