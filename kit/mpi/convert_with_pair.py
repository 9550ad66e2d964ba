"""Convert an image for a site in one pass: pair its MPI with the site's host MPI while the
layers stream through the converter, then add the pair's mount points and alias links to
the same stream, and write OUT.pair.yaml beside OUT.

The MPI-related files (imagefs.wanted) are copied aside as they pass; once the last layer is
through the pair is decided from them, in time for its mount points and links to be written
into the image: conversion is the only moment they can be added to a read-only image
(SquashFS, or a tarball unpacked by ch-convert). An image that cannot pair fails the
conversion and nothing is written.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kit.image.convert import ConversionReport, convert
from kit.image.flatten import Entry
from kit.image_names import PAIR, current_link, image_name, pair_path
from kit.mpi.imagefs import WantedTree
from kit.mpi.pair_builder import Pair, pair_from_root, write_pair
from kit.runtime.imageenv import ENV_MAX, ENVIRONMENT, parse_environment
from kit.site import Site, load_site


@dataclass
class PairedConversion:
    report: ConversionReport
    pair: Pair
    pair_file: Path | None  # None in a dry run


class _PairTap:
    """kit.image.convert's Tap: keeps the MPI files passing by, decides the pair at the end."""

    def __init__(self, site: Site, mode: str, label: str, workdir: Path):
        self.site, self.mode, self.label = site, mode, label
        self.tree = WantedTree(workdir / "root")
        self.pair: Pair | None = None
        self.copy: IO[bytes] | None = None  # the kept file the output writer reads next
        self.environment: bytes | None = None  # /ch/environment as written into the output

    def see(self, entry: Entry) -> Entry:
        self.close()
        if self.pair is not None:
            return self._environment(entry)
        if not self.tree.offer(entry) or not entry.info.isreg():
            return entry
        self.copy = open(self.tree.path(entry.info.name), "rb")  # the stream was consumed
        return Entry(entry.info, self.copy)

    def _environment(self, entry: Entry) -> Entry:
        """The image's /ch/environment, which the converter writes after the pair is decided: kept
        (bounded) for a runtime that passes it to the ranks itself (kit.runtime.udocker)."""
        if (
            entry.info.name.removeprefix("./") != ENVIRONMENT
            or not entry.info.isreg()
            or entry.data is None
            or entry.info.size > ENV_MAX
        ):
            return entry
        self.environment = entry.data.read(ENV_MAX + 1)
        return Entry(entry.info, io.BytesIO(self.environment))

    def extras(self) -> tuple[Sequence[str], Mapping[str, str]]:
        self.close()
        self.pair = pair_from_root(self.site, self.tree.commit(), self.label, mode=self.mode)
        return self.pair.mount_points, self.pair.links

    def close(self) -> None:
        if self.copy:
            self.copy.close()
            self.copy = None


def convert_paired(
    src: str | os.PathLike,
    out: str | os.PathLike,
    site: Site | str | os.PathLike,
    *,
    mode: str = "full",
    dry_run: bool = False,
    **options: Any,
) -> PairedConversion:
    """kit.image.convert(SRC, OUT) with the site's MPI pair decided on the way, and OUT.pair.yaml.

    `options` go to kit.image.convert (fmt, image, mount_points, level, limits, progress, threads,
    force). OUT.pair.yaml goes into place with the image and its other sidecars, never apart.
    Raises KitError (nothing written) if the image's MPI cannot pair with the site's.
    """
    site = load_site(site)
    installed = current_link(site.container.image_dir, image_name(Path(out).name))
    with tempfile.TemporaryDirectory(prefix="kit-pair-") as tmp:
        tap = _PairTap(site, mode, str(src), Path(tmp))

        def finished() -> Pair:
            pair = tap.pair
            if pair is None:  # convert calls tap.extras once the last layer is through
                raise RuntimeError(f"{src}: converted without the image's MPI read")
            pair.image, pair.missing = str(out), []  # convert created each one or raised
            pair.image_env = True  # the converter always writes /ch/environment
            if tap.environment is not None and pair.environment is None:
                pair.environment = parse_environment(tap.environment, Path(out) / ENVIRONMENT)
            # where `kit transfer push --install` puts it: the launch line's image
            pair.site_image = installed
            return pair

        try:
            report = convert(
                src,
                out,
                dry_run=dry_run,
                tap=tap,
                sidecars={PAIR: lambda _report, path: write_pair(finished(), path)},
                **options,
            )
        finally:
            tap.close()
    pair = finished()
    return PairedConversion(report, pair, None if dry_run else pair_path(out))
