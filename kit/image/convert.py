"""``kit image convert``: SRC image -> Charliecloud image OUT (+ OUT.sha256, OUT.manifest.json).

OUT is checked before any work (kit.image.target: never what the kit did not make) and put
into place so that it is the old or the new image at every instant (kit.image.output).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from kit.errors import KitError
from kit.image.flatten import Entry, Flattener, Note, Report
from kit.image.layers import Limits
from kit.image.manifest import manifest_text, sha256_text
from kit.image.output import Stager, claim, stage_text
from kit.image.sources import Image, open_source_image
from kit.image.target import identity, plan
from kit.image.writers import open_writer
from kit.image_names import MANIFEST
from kit.progress import counter

DEFAULT_LEVEL = 5  # zlib-ng 5: within ~1% of gzip -6's size at 3x its speed (docs/benchmarks.md)
LEVELS = {"tar.gz": (0, 9), "sqfs": (1, 9), "sif": (1, 9)}  # 0-3 ISA-L, 4-9 zlib-ng; mksquashfs


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
    identity: dict | None = None  # how the next run (and a reader) knows the manifest describes OUT
    sidecars: list[str] = field(default_factory=list)  # the suffixes of the files beside OUT


def convert(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    fmt: str | None = None,
    image: str | None = None,
    mount_points: Sequence[str] = (),
    links: Mapping[str, str] = {},
    level: int = DEFAULT_LEVEL,
    limits: Limits = Limits(),
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
    threads: int | None = None,
    tap: Tap | None = None,
    force: bool = False,
    sidecars: Mapping[str, Callable[[ConversionReport, Path], object]] = {},
) -> ConversionReport:
    """Convert SRC into a Charliecloud image at OUT, atomically; or only report (dry run).

    ``progress(done, total)`` is called with stored bytes read so far. ``links`` maps in-image
    paths to the absolute targets of symlinks to create there (made relative). ``force``
    replaces an earlier kit output of the same form (nothing else). ``sidecars`` maps more
    suffixes of files beside OUT (.pair.yaml) to functions writing them for the finished
    conversion, so that they go into place with the image.
    """
    src, out = Path(src), Path(out)
    target = plan(src, out, fmt=fmt, force=force)  # refuses before any work; decides the form
    fmt = target.fmt
    lo, hi = LEVELS.get(fmt, (level, level))
    if not lo <= level <= hi:
        raise KitError(f"--level {level}: out of range for {fmt}", fix=f"give {lo}..{hi}")
    img = open_source_image(src, image)
    total = sum(l.blob.size for l in img.layers) + sum(l.blob.size for l in img.layers[1:])
    flat = Flattener(img, limits, counter(total, progress))
    result = ConversionReport(src, None if dry_run else out, fmt, img, dry_run=dry_run)
    threads = threads or max(1, min(4, os.cpu_count() or 1))
    stream = flat.entries(mount_points, links, tap.extras if tap else None)
    if dry_run:
        for entry in stream:
            if tap:
                tap.see(entry)
            result.entries += 1
        _fill(result, flat.report)
        return result
    with claim(target) as work:
        try:
            writer = open_writer(
                work.path, fmt, level=level, threads=threads, keep_fds=(work.lock_fd,), image=img
            )
            try:
                for entry in stream:
                    if tap:
                        entry = tap.see(entry)
                    result.entries += 1
                    writer.add(entry)
                built = writer.finish()
            except BaseException:
                writer.abort()
                raise
            result.sha256, result.size = writer.sha256, writer.size
            _fill(result, flat.report)
            result.identity = identity(built, fmt)
            stagers: dict[str, Stager] = {s: _bind(f, result) for s, f in sidecars.items()}
            if result.sha256:
                stagers[".sha256"] = stage_text(sha256_text(result))
            result.sidecars = sorted(stagers) + [MANIFEST]
            stagers[MANIFEST] = stage_text(manifest_text(result))
            work.commit(built, stagers)
        except OSError as exc:  # a full disk, a quota, a vanished directory
            done = (
                "the new image is in place, its sidecars follow on the next run"
                if work.swapped
                else "nothing was replaced"
            )
            raise KitError(
                f"{out}: {exc.strerror or exc} while writing it; {done}",
                fix=f"check the free space and permissions of {target.parent}",
            ) from exc
    return result


def _bind(func: Callable[[ConversionReport, Path], object], result: ConversionReport) -> Stager:
    return lambda path: func(result, path)


def _fill(result: ConversionReport, report: Report) -> None:
    result.dropped, result.changed = report.dropped, report.changed
    result.counts = dict(sorted(report.counts.items()))
    result.mount_points, result.links = report.mount_points, report.links
