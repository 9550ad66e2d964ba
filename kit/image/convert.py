"""``kit image convert``: SRC image -> Charliecloud image OUT (+ OUT.sha256, OUT.manifest.json)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

from kit.errors import KitError
from kit.image.flatten import Entry, Flattener, Note, Report
from kit.image.layers import Limits
from kit.image.manifest import write_sidecars
from kit.image.sources import Image, open_image
from kit.image.writers import format_for, open_writer

DEFAULT_LEVEL = 5  # zlib-ng 5: within ~1% of gzip -6's size at 3x its speed (docs/benchmarks.md)
LEVELS = {"tar.gz": (0, 9), "sqfs": (1, 9)}  # 0-3 ISA-L, 4-9 zlib-ng; mksquashfs gzip levels


class Tap(Protocol):
    """Looks at the stream as it is written (e.g. to pair the image's MPI in the same pass)."""

    def see(self, entry: Entry) -> Entry:
        """Called with every entry before it is written; returns the entry to write."""

    def extras(self) -> tuple[Sequence[str], Mapping[str, str]]:
        """Called once the last layer is through: more mount points and links to create."""


@dataclass
class ConversionReport:
    source: Path
    output: Path | None
    format: str
    image: Image
    sha256: str | None = None
    size: int = 0
    dropped: list[Note] = field(default_factory=list)
    changed: list[Note] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    mount_points: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    entries: int = 0
    dry_run: bool = False


def convert(src: str | os.PathLike, out: str | os.PathLike, *, fmt: str | None = None,
            image: str | None = None, mount_points: Sequence[str] = (), links: Mapping[str, str] = {},
            level: int = DEFAULT_LEVEL, limits: Limits = Limits(), dry_run: bool = False,
            progress: Callable[[int, int], None] | None = None,
            threads: int | None = None, tap: Tap | None = None) -> ConversionReport:
    """Convert SRC into a Charliecloud image at OUT, atomically; or only report (dry run).

    ``progress(done, total)`` is called with stored bytes read so far. ``links`` maps in-image
    paths to the absolute targets of symlinks to create there (made relative).
    """
    src, out = Path(src), Path(out)
    fmt = format_for(out, fmt)
    lo, hi = LEVELS.get(fmt, (level, level))
    if not lo <= level <= hi:
        raise KitError(f"--level {level}: {fmt} output takes {lo}..{hi}")
    img = open_image(src, image)
    total = sum(l.blob.size for l in img.layers) + sum(l.blob.size for l in img.layers[1:])
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    flat = Flattener(img, limits, tick)
    result = ConversionReport(src, None if dry_run else out, fmt, img, dry_run=dry_run)
    threads = threads or max(1, min(4, os.cpu_count() or 1))
    writer = None if dry_run else open_writer(out, fmt, level, threads)
    try:
        for entry in flat.entries(mount_points, links, tap and tap.extras):
            if tap:
                entry = tap.see(entry)
            result.entries += 1
            if writer:
                writer.add(entry)
        if writer:
            writer.commit()
            result.sha256, result.size = writer.sha256, writer.size
    except BaseException:
        if writer:
            writer.abort()
        raise
    _fill(result, flat.report)
    if not dry_run:
        try:
            write_sidecars(result)
        except BaseException:
            for path in (out, Path(f"{out}.sha256"), Path(f"{out}.manifest.json")):
                if path.is_file():
                    path.unlink()
            raise
    return result


def _fill(result: ConversionReport, report: Report) -> None:
    result.dropped, result.changed = report.dropped, report.changed
    result.counts = dict(sorted(report.counts.items()))
    result.mount_points, result.links = report.mount_points, report.links
