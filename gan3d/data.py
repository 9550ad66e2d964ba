"""Calorimeter shower files (CLIC layout) -> preprocessed, sharded, reshuffled training batches.

Layout read: HDF5 dataset `ECAL` (N,25,25,25) cell energies (axes x, y, z; z = depth) and the
primary energy in GeV in `target[:,1]` (newer files) or `energy` (older files).
Preprocessing as in the reference: cells below 1e-6 -> 0, times `xscale`; Ep = E / 100.

Unlike the reference (every rank read every file in the same order and the shuffle was thrown
away), `ShowerStream` gives each Horovod rank a disjoint share of every epoch, the same number of
batches on every rank (so collectives stay in lockstep), a fresh order each epoch derived from
(seed, epoch), and reads contiguous blocks of events so only a bounded window is in memory.
"""

from __future__ import annotations

import glob
import math
import os
import queue
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gan3d.showerfile import GRID, MAKE_DATA_HINT, MAX_CHUNK_BYTES, DataError, open_checked
from kit.excerpt import one_line

THRESHOLD = 1e-6
SKIP_HINT = "or pass --skip-bad-events to leave such events out"
__all__ = [
    "DataError",
    "EventRanges",
    "EventSplit",
    "ShowerFiles",
    "ShowerStream",
    "expand_data_arg",
    "open_split",
    "preprocess",
    "split_events",
]


def _natural_key(path: Path) -> list:
    """Order EleEscan_1_10 after EleEscan_1_9."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(path))]


def expand_data_arg(spec: str) -> list[Path]:
    """`--data` value -> file list: a directory (its *.h5, natural order), a glob, or a,b,c
    files.
    """
    out: list[Path] = []
    for part in (p.strip() for p in str(spec).split(",")):
        if not part:
            continue
        path = Path(part)
        if path.is_dir():
            found = sorted(path.glob("*.h5"), key=_natural_key)
            if not found:
                raise DataError(
                    f"data directory {path} holds no *.h5 files; "
                    "fix: point --data at the shower files or run `python -m gan3d simulate --out DIR`"
                )
        elif glob.has_magic(part):
            found = sorted((Path(p) for p in glob.glob(part)), key=_natural_key)
            if not found:
                raise DataError(
                    f"data pattern {part!r} matches no files; fix: check the path or the pattern"
                )
        elif os.path.lexists(path):
            found = [path]
        else:
            raise DataError(
                f"not found: {part} (no such file or directory); fix: check --data, "
                "or make showers with `python -m gan3d simulate --out DIR`"
            )
        out.extend(p for p in found if p not in out)
    if not out:
        raise DataError(
            f"--data {spec!r} names no files; fix: give a directory, a glob or comma-separated files"
        )
    return out


# whole files are held out only if they come this close (relative) to the asked count
HELD_OUT_TOLERANCE = 0.25
SPLIT_STREAM = 7919  # the split's random stream, apart from the epochs' (seed, epoch) streams


def held_out_count(total: int, fraction: float) -> int:
    """round(fraction x total), halves up, kept within [1, total - 1] so both sides have events."""
    return min(total - 1, max(1, math.floor(fraction * total + 0.5)))


@dataclass(frozen=True)
class EventSplit:
    """Which usable events of each file train and which are held out, as (file, start, stop)
    ranges.
    """

    train: tuple[tuple[int, int, int], ...]
    test: tuple[tuple[int, int, int], ...]
    by: str  # "files" (whole files held out) or "events" (a range of every file)
    target: int  # held_out_count(): what was asked for


def split_events(counts: Sequence[int], fraction: float, seed: int) -> EventSplit:
    """Hold out `fraction` of the events, the same on every
    rank (a function of counts and seed only).

    Whole files, picked in a seeded order, when some of them add up to within HELD_OUT_TOLERANCE
    of the asked count (so many files give the reference's file split); otherwise a contiguous
    range of every file, sized in proportion to the file (the held-out events then span the data
    set) at a seeded offset, holding out exactly the asked count.
    """
    total = sum(counts)
    if not 0.0 < fraction < 1.0:
        raise DataError(f"--test-fraction {fraction}: must be between 0 and 1")
    if total < 2:
        raise DataError(
            f"the data hold {total} usable event(s): too few to hold out a share for validation; "
            "fix: give more events or --validation-data FILES"
        )
    target = held_out_count(total, fraction)
    rng = np.random.default_rng([seed, SPLIT_STREAM])
    chosen = _whole_files(counts, rng.permutation(len(counts)), target)
    if chosen is not None:
        return EventSplit(
            tuple((k, 0, c) for k, c in enumerate(counts) if c and k not in chosen),
            tuple((k, 0, counts[k]) for k in sorted(chosen)),
            "files",
            target,
        )
    train: list[tuple[int, int, int]] = []
    test: list[tuple[int, int, int]] = []
    for k, (count, take) in enumerate(zip(counts, _apportion(counts, target))):
        start = int(rng.integers(count - take + 1))
        train += [(k, 0, start)] if start else []
        test += [(k, start, start + take)] if take else []
        train += [(k, start + take, count)] if start + take < count else []
    return EventSplit(tuple(train), tuple(test), "events", target)


def _whole_files(counts: Sequence[int], order: np.ndarray, target: int) -> set[int] | None:
    """Files taken in `order` whenever one brings the held-out count closer to the target;
    None unless that ends within the tolerance with at least one file on each side."""
    chosen, held = set(), 0
    for k in (int(i) for i in order):
        if counts[k] and abs(held + counts[k] - target) < abs(held - target):
            chosen.add(k)
            held += counts[k]
    if not chosen or held == sum(counts) or abs(held - target) > HELD_OUT_TOLERANCE * target:
        return None
    return chosen


def _apportion(counts: Sequence[int], target: int) -> list[int]:
    """`target` shared over files in proportion to their counts (largest remainders; sums
    exactly).
    """
    total = sum(counts)
    quotas = [target * c / total for c in counts]
    shares = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(counts)), key=lambda k: (shares[k] - quotas[k], k))
    for k in by_remainder[: target - sum(shares)]:
        shares[k] += 1
    return shares


def preprocess(
    raw: np.ndarray, energy_gev: np.ndarray, xscale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference preprocessing -> (images (B,25,25,25,1), Ep in 100 GeV, cell sum), all float32."""
    return _preprocess_owned(np.array(raw, dtype=np.float32), energy_gev, xscale)


def _preprocess_owned(
    images: np.ndarray, energy_gev: np.ndarray, xscale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`preprocess` in place on a float32 array nobody else holds (saves a copy per batch)."""
    images[images < THRESHOLD] = 0.0
    if xscale != 1.0:
        images *= np.float32(xscale)
    cellsum = images.reshape(len(images), -1).sum(axis=1, dtype=np.float64).astype(np.float32)
    ep = (np.asarray(energy_gev, dtype=np.float64) / 100.0).astype(np.float32)
    return images[..., None], ep, cellsum


class ShowerFiles:
    """A checked set of shower files, each opened once; reads contiguous event ranges on demand.

    Construction checks every file's layout (gan3d.showerfile) and energies, and keeps only the
    energies in memory. Events with a NaN, Inf or non-positive energy, or with NaN/Inf cells, are
    refused with the file and event named; with `skip_bad_events` they are left out instead
    (`skipped` counts them per file). Finding bad cells up front costs one extra read of every
    file, so only the skipping mode does it; otherwise each block of cells is checked as it is
    read (one vectorised pass over memory already in cache), and the first and last events at once.
    """

    def __init__(self, paths: Sequence[str | Path], *, skip_bad_events: bool = False):
        self.paths = [Path(p) for p in paths]
        if not self.paths:
            raise DataError("no data files given; fix: pass --data DIR|GLOB|a.h5,b.h5")
        self.skip_bad_events = skip_bad_events
        self._h5: list = []
        # file event index of each usable event (None: all)
        self._kept: list[np.ndarray | None] = []
        self.counts: list[int] = []
        self.energies: list[np.ndarray] = []  # GeV, per file, usable events only
        self.skipped: list[int] = []
        try:
            for path in self.paths:
                h5, _, energy, source = open_checked(path)
                self._h5.append(h5)
                self._add(len(self._h5) - 1, energy, source)
        except BaseException:
            self.close()
            raise
        self.num_events = sum(self.counts)

    def _add(self, k: int, energy: np.ndarray, source: str) -> None:
        good = np.isfinite(energy) & (energy > 0)
        if self.skip_bad_events:
            good &= self._finite_events(k, len(energy))
        elif not good.all():
            bad = np.flatnonzero(~good)
            raise DataError(
                f"data file {self.paths[k]}: "
                f"dataset {source} event {bad[0]} holds the energy {energy[bad[0]]!r} (NaN, "
                f"Inf or not positive; {len(bad)} such event(s)); fix: "
                f"repair or drop them ({MAKE_DATA_HINT}), {SKIP_HINT}"
            )
        kept = None if good.all() else np.flatnonzero(good)
        self._kept.append(kept)
        self.energies.append(energy if kept is None else energy[kept])
        self.counts.append(len(self.energies[-1]))
        self.skipped.append(len(energy) - self.counts[-1])
        # the first and last events decode and are finite
        if self.counts[-1] and not self.skip_bad_events:
            self.read(k, 0, 1)
            self.read(k, self.counts[-1] - 1, self.counts[-1])

    def _finite_events(self, k: int, events: int) -> np.ndarray:
        """Per event of file k: are all its cells finite? One pass in chunk-sized blocks."""
        ecal = self._h5[k]["ECAL"]
        per_chunk = ecal.chunks[0] if ecal.chunks else 64
        block = max(1, min(per_chunk, MAX_CHUNK_BYTES // (GRID**3 * 4)))
        buffer = np.empty((min(block, events), GRID, GRID, GRID), np.float32)
        good = np.ones(events, bool)
        for start in range(0, events, block):
            part = self._read_raw(k, start, min(start + block, events), buffer)
            if not np.isfinite(part).all():
                good[start : start + len(part)] = np.isfinite(part.reshape(len(part), -1)).all(
                    axis=1
                )
        return good

    def _read_raw(self, k: int, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        """Events [start, stop) of file k as stored (no event left out) into out[:stop-start]."""
        out = out[: stop - start]
        try:
            self._h5[k]["ECAL"].read_direct(out, np.s_[start:stop])
        except (OSError, ValueError, TypeError) as exc:
            raise DataError(
                f"data file {self.paths[k]}: "
                f"dataset ECAL events {start}..{stop} cannot be read ({one_line(exc)}); fix: {MAKE_DATA_HINT}"
            ) from None
        return out

    @property
    def skipped_events(self) -> int:
        return sum(self.skipped)

    def skipped_between(self, k: int, start: int, stop: int) -> int:
        """Bad events of file k left out before each usable event in [start, stop), plus those
        after the file's last usable event when the range ends there (ranges that partition a
        file thus share its skipped events out exactly)."""
        kept = self._kept[k]
        if kept is None or stop <= start:
            return 0

        def before(u: int) -> int:  # bad events before usable event u
            return int(kept[u]) - u if u >= 0 else 0

        return (self.skipped[k] if stop == self.counts[k] else before(stop - 1)) - before(start - 1)

    def stored_span(self, k: int, start: int, stop: int) -> dict[str, int]:
        """Usable events [start, stop) of file k as HDF5 event indices: {"first", "stop"}."""
        kept = self._kept[k]
        if kept is None:
            return {"first": start, "stop": stop}
        return {"first": int(kept[start]), "stop": int(kept[stop - 1]) + 1}

    def read(
        self, file_index: int, start: int, stop: int, *, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Raw ECAL cells (float32) of usable events [start, stop) of one file, into `out` without a
        temporary copy when given; contiguous events are one HDF5 read. NaN/Inf cells are
        refused."""
        if out is None:
            out = np.empty((stop - start, GRID, GRID, GRID), np.float32)
        kept = self._kept[file_index]
        if kept is None:
            self._read_raw(file_index, start, stop, out)
        else:  # one read per run of consecutive usable events
            index = kept[start:stop]
            pos = 0
            for run in np.split(index, np.flatnonzero(np.diff(index) != 1) + 1):
                if len(run):
                    self._read_raw(
                        file_index, int(run[0]), int(run[-1]) + 1, out[pos : pos + len(run)]
                    )
                    pos += len(run)
        if not np.isfinite(out).all():
            first = int(np.argmin(np.isfinite(out.reshape(len(out), -1)).all(axis=1))) + start
            event = first if kept is None else int(kept[first])
            raise DataError(
                f"data file {self.paths[file_index]}: dataset ECAL event {event} holds NaN or Inf cells; "
                f"fix: repair or drop it ({MAKE_DATA_HINT}), {SKIP_HINT}"
            )
        return out

    def load(
        self, n: int | None = None, xscale: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first n events (all when None) across the files, preprocessed (for validation)."""
        n = self.num_events if n is None else min(n, self.num_events)
        parts: list[np.ndarray] = []
        energies: list[np.ndarray] = []
        for k, count in enumerate(self.counts):
            take = min(count, n - sum(len(e) for e in energies))
            if take <= 0:
                break
            parts.append(self.read(k, 0, take))
            energies.append(self.energies[k][:take])
        if not parts:
            raise DataError(f"data files {[str(p) for p in self.paths]} hold no events")
        return preprocess(np.concatenate(parts), np.concatenate(energies), xscale)

    def close(self) -> None:
        for h5 in self._h5:
            h5.close()
        self._h5 = []

    def __enter__(self) -> ShowerFiles:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class EventRanges:
    """Some event ranges of an open ShowerFiles, read through it: a training or held-out set.

    Offers what ShowerStream reads (`counts`, `energies`, `read`, `num_events`), one entry per
    range, so a by-event split needs no copy of the data and every range is read contiguously.
    """

    def __init__(
        self, files: ShowerFiles, ranges: Sequence[tuple[int, int, int]], label: str, fix: str
    ):
        self.files, self.ranges, self.label, self.fix = files, list(ranges), label, fix
        # the files drawn from
        self.paths = list(dict.fromkeys(files.paths[k] for k, _, _ in self.ranges))
        self.counts = [b - a for _, a, b in self.ranges]
        self.energies = [files.energies[k][a:b] for k, a, b in self.ranges]
        self.num_events = sum(self.counts)

    def read(
        self, index: int, start: int, stop: int, *, out: np.ndarray | None = None
    ) -> np.ndarray:
        k, a, _ = self.ranges[index]
        return self.files.read(k, a + start, a + stop, out=out)

    @property
    def skipped_events(self) -> int:
        """Bad events left out inside these ranges (each counted with the next usable event)."""
        return sum(self.files.skipped_between(k, a, b) for k, a, b in self.ranges)

    def describe(self) -> list[dict]:
        """Per range: the file and its events as stored (`first`, `stop`: HDF5 event indices)."""
        return [
            {"file": str(self.files.paths[k]), **self.files.stored_span(k, a, b), "events": b - a}
            for k, a, b in self.ranges
        ]

    def close(self) -> None:
        self.files.close()


def open_split(
    paths: Sequence[Path],
    validation_paths: Sequence[Path] | None,
    *,
    fraction: float,
    seed: int,
    skip_bad_events: bool = False,
) -> tuple[ShowerFiles | EventRanges, ShowerFiles | EventRanges, dict]:
    """(training set, validation set, what was held out): `validation_paths` when given, else
    `fraction` of the events of `paths` (split_events). The record is the same on every rank."""
    if validation_paths is not None:
        given = ShowerFiles(paths, skip_bad_events=skip_bad_events)
        try:
            held = ShowerFiles(validation_paths, skip_bad_events=skip_bad_events)
        except BaseException:
            given.close()
            raise
        source = [{"file": str(p), "events": n} for p, n in zip(held.paths, held.counts)]
        return given, held, {"by": "validation-data", "events": held.num_events, "source": source}
    files = ShowerFiles(paths, skip_bad_events=skip_bad_events)
    try:
        split = split_events(files.counts, fraction, seed)
    except DataError:
        files.close()
        raise
    fix = (
        "raise --test-fraction (or give --validation-data), give more events or lower --batch-size"
    )
    train = EventRanges(files, split.train, "the training events (those not held out)", fix)
    test = EventRanges(
        files, split.test, f"the events held out by --test-fraction {fraction:g}", fix
    )
    return (
        train,
        test,
        {
            "by": split.by,
            "events": test.num_events,
            "of_events": files.num_events,
            "fraction": test.num_events / files.num_events,
            "requested_fraction": fraction,
            "seed": seed,
            "source": test.describe(),
        },
    )


def describe_held_out(held_out: dict, limit: int = 3) -> str:
    """One line for the run's output: how many events, how chosen, and from where."""
    where = [
        f"{Path(s['file']).name}"
        + (f" events {s['first']}..{s['stop'] - 1}" if "first" in s else "")
        for s in held_out["source"]
    ]
    more = f" and {len(where) - limit} more range(s)" if len(where) > limit else ""
    if held_out["by"] == "validation-data":
        return (
            f"validation on {held_out['events']} events of --validation-data: "
            f"{', '.join(where[:limit])}{more}"
        )
    how = "whole files" if held_out["by"] == "files" else "an event range of every file"
    return (
        f"held out {held_out['events']} of {held_out['of_events']} events for validation "
        f"({100 * held_out['fraction']:.1f}%, --test-fraction {held_out['requested_fraction']:g}) as {how}, "
        f"chosen by --seed {held_out['seed']}: {', '.join(where[:limit])}{more}"
    )


class ShowerStream:
    """Per-rank batches of (images, Ep, cell sum), reshuffled every epoch, in bounded memory.

    Each epoch, from rng(seed, epoch) shared by all ranks: every file is cut into blocks of
    `block_events` contiguous events at a random phase, the blocks of all files are put in a
    random order, and the resulting sequence of events is cut into `size` equal slices
    (the last N mod size events are left out). Rank r reads its slice block by block, mixes
    `window_blocks` blocks at a time in a buffer shuffled with rng(seed, epoch, rank, size), and
    yields batches. So the ranks see disjoint events, each has `batches_per_epoch` batches, and
    at most `max_buffer_events` events are in memory. A background thread reads ahead.
    """

    def __init__(
        self,
        files: ShowerFiles | EventRanges,
        *,
        batch_size: int,
        rank: int = 0,
        size: int = 1,
        seed: int = 0,
        xscale: float = 1.0,
        shuffle: bool = True,
        drop_remainder: bool = True,
        block_events: int | None = None,
        window_blocks: int = 8,
        prefetch_batches: int = 2,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not in [0, size={size})")
        self.files, self.batch_size, self.rank, self.size = files, batch_size, rank, size
        self.seed, self.xscale, self.shuffle, self.drop_remainder = (
            seed,
            float(xscale),
            shuffle,
            drop_remainder,
        )
        self.block_events = block_events or min(1000, max(batch_size, 128))
        self.window_blocks = max(1, window_blocks)
        self.prefetch_batches = max(0, prefetch_batches)
        per_rank = files.num_events // size
        if drop_remainder:
            self.batches_per_epoch = per_rank // batch_size
            self.events_per_rank = self.batches_per_epoch * batch_size
        else:
            self.batches_per_epoch = math.ceil(per_rank / batch_size)
            self.events_per_rank = per_rank
        if self.batches_per_epoch == 0:
            what = getattr(files, "label", f"data files {[str(p) for p in files.paths]}")
            fix = getattr(files, "fix", "simulate more events or lower --batch-size")
            raise DataError(
                f"{what} hold {files.num_events} events: "
                f"fewer than {size} rank(s) x batch size {batch_size}; fix: {fix}"
            )

    @property
    def max_buffer_events(self) -> int:
        """Events held at once by the stream and its consumer: window buffer and batches in
        flight.
        """
        # queued, in-flight and consumer's batches
        return (
            self.window_blocks * self.block_events
            + self.batch_size  # the window buffer
            + (self.prefetch_batches + 3) * self.batch_size
        )

    def plan(self, epoch: int) -> list[tuple[int, int, int]]:
        """This rank's (file, start, stop) reads for an epoch, in reading order."""
        rng = np.random.default_rng([self.seed, epoch])
        blocks: list[tuple[int, int, int]] = []
        for k, count in enumerate(self.files.counts):
            phase = int(rng.integers(self.block_events)) if self.shuffle else 0
            edges = (
                [0] + list(range(phase or self.block_events, count, self.block_events)) + [count]
            )
            blocks.extend((k, a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a)
        if self.shuffle:
            blocks = [blocks[i] for i in rng.permutation(len(blocks))]
        lo = self.rank * (self.files.num_events // self.size)
        hi = lo + self.events_per_rank
        pieces, pos = [], 0
        for k, a, b in blocks:
            s, e = max(a, a + lo - pos), min(b, a + hi - pos)
            if e > s:
                pieces.append((k, s, e))
            pos += b - a
            if pos >= hi:
                break
        return pieces

    def _batches(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        rng = np.random.default_rng([self.seed, epoch, self.rank, self.size, 1])
        pieces = self.plan(epoch)
        # one window buffer for the whole epoch: carried-over events first, then the window's blocks
        buffer = np.empty(
            (self.window_blocks * self.block_events + self.batch_size, GRID, GRID, GRID), np.float32
        )
        energy = np.empty(len(buffer))
        carry = 0
        for w in range(0, len(pieces), self.window_blocks):
            fill = carry
            for k, a, b in pieces[w : w + self.window_blocks]:
                self.files.read(k, a, b, out=buffer[fill : fill + b - a])
                energy[fill : fill + b - a] = self.files.energies[k][a:b]
                fill += b - a
            order = rng.permutation(fill) if self.shuffle else np.arange(fill)
            full = fill // self.batch_size * self.batch_size
            for i in range(0, full, self.batch_size):
                take = order[i : i + self.batch_size]
                yield _preprocess_owned(buffer[take], energy[take], self.xscale)
            # fewer than batch_size events carried to the front of the next window
            rest = order[full:]
            buffer[: len(rest)], energy[: len(rest)] = buffer[rest], energy[rest]
            carry = len(rest)
        if carry and not self.drop_remainder:
            yield preprocess(buffer[:carry], energy[:carry], self.xscale)

    def epoch(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Batches (images (B,25,25,25,1), Ep (B,), cell sum (B,)) float32 of one epoch for this
        rank.
        """
        if self.prefetch_batches == 0:
            return self._batches(epoch)
        return _read_ahead(self._batches(epoch), self.prefetch_batches)


_DONE = object()


def _read_ahead(source: Iterator, depth: int) -> Iterator:
    """Run `source` in a thread, `depth` items ahead, so file reads overlap the training step."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in source:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)

    def consume() -> Iterator:
        thread = threading.Thread(target=work, name="shower-read-ahead", daemon=True)
        thread.start()  # on the first next(): an iterator never started leaves no thread behind
        try:
            while True:
                item = q.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()

    return consume()
