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
import queue
import re
import threading
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

GRID = 25
THRESHOLD = 1e-6
MAKE_DATA_HINT = "regenerate it (python -m gan3d simulate --out DIR) or re-copy it from the source"


class DataError(Exception):
    """A data file or argument that cannot be used; the message names the file, dataset and fix."""


def _natural_key(path: Path) -> list:
    """Order EleEscan_1_10 after EleEscan_1_9."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(path))]


def expand_data_arg(spec: str) -> list[Path]:
    """`--data` value -> file list: a directory (its *.h5, natural order), a glob, or a,b,c files."""
    out: list[Path] = []
    for part in (p.strip() for p in str(spec).split(",")):
        if not part:
            continue
        path = Path(part)
        if path.is_dir():
            found = sorted(path.glob("*.h5"), key=_natural_key)
            if not found:
                raise DataError(f"data directory {path} holds no *.h5 files; "
                                "fix: point --data at the shower files or run `python -m gan3d simulate --out DIR`")
        elif glob.has_magic(part):
            found = sorted((Path(p) for p in glob.glob(part)), key=_natural_key)
            if not found:
                raise DataError(f"data pattern {part!r} matches no files; fix: check the path or the pattern")
        else:
            found = [path]
        out.extend(p for p in found if p not in out)
    if not out:
        raise DataError(f"--data {spec!r} names no files; fix: give a directory, a glob or comma-separated files")
    return out


def train_test_split(paths: Sequence[str | Path], test_fraction: float = 0.1,
                     n_test_files: int | None = None) -> tuple[list[Path], list[Path]]:
    """Split by whole files like the reference: the LAST files (in the given order) are the test set.

    `n_test_files` wins over `test_fraction`; a fraction > 0 keeps at least one test file, and
    at least one training file always remains.
    """
    paths = [Path(p) for p in paths]
    if n_test_files is None:
        if not 0.0 <= test_fraction < 1.0:
            raise DataError(f"test fraction {test_fraction} must be in [0, 1)")
        n_test_files = max(1, round(len(paths) * test_fraction)) if test_fraction > 0 else 0
    if n_test_files < 0 or n_test_files >= len(paths):
        raise DataError(f"cannot hold out {n_test_files} test file(s) from {len(paths)} data file(s); "
                        "fix: give more files (python -m gan3d simulate --files N) or fewer test files")
    cut = len(paths) - n_test_files
    return paths[:cut], paths[cut:]


def preprocess(raw: np.ndarray, energy_gev: np.ndarray, xscale: float = 1.0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference preprocessing -> (images (B,25,25,25,1), Ep in 100 GeV, cell sum), all float32."""
    return _preprocess_owned(np.array(raw, dtype=np.float32), energy_gev, xscale)


def _preprocess_owned(images: np.ndarray, energy_gev: np.ndarray, xscale: float
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

    Construction validates every file (exists, HDF5 and not truncated, `ECAL` (N,25,25,25),
    energy in `target[:,1]` or `energy`, equal lengths, finite positive energies) and keeps
    only the energies in memory.
    """

    def __init__(self, paths: Sequence[str | Path]):
        import h5py

        self.paths = [Path(p) for p in paths]
        if not self.paths:
            raise DataError("no data files given; fix: pass --data DIR|GLOB|a.h5,b.h5")
        self._h5: list = []
        self.counts: list[int] = []
        self.energies: list[np.ndarray] = []  # GeV, per file
        try:
            for path in self.paths:
                handle, energy = self._open_checked(h5py, path)
                self._h5.append(handle)
                self.counts.append(len(energy))
                self.energies.append(energy)
        except BaseException:
            self.close()
            raise
        self.num_events = sum(self.counts)

    @staticmethod
    def _open_checked(h5py, path: Path):
        if not path.is_file():
            raise DataError(f"data file {path} does not exist (expected HDF5 with datasets ECAL and target); "
                            "fix: check --data or run `python -m gan3d simulate --out DIR`")
        try:
            h5 = h5py.File(path, "r")
        except OSError as exc:
            kind = "is not an HDF5 file" if not h5py.is_hdf5(path) else "is truncated or corrupt"
            raise DataError(f"data file {path} {kind}, so dataset ECAL cannot be read ({exc}); "
                            f"fix: {MAKE_DATA_HINT}") from None
        try:
            return h5, ShowerFiles._check_layout(h5, path)
        except BaseException:
            h5.close()
            raise

    @staticmethod
    def _check_layout(h5, path: Path) -> np.ndarray:
        names = sorted(h5.keys())
        if "ECAL" not in h5:
            raise DataError(f"data file {path} has no dataset ECAL (datasets found: {names}); "
                            "fix: use CLIC-layout files (ECAL (N,25,25,25) plus target or energy)")
        ecal = h5["ECAL"]
        if ecal.ndim != 4 or tuple(ecal.shape[1:]) != (GRID, GRID, GRID):
            raise DataError(f"data file {path}: dataset ECAL has shape {ecal.shape}, expected (N,25,25,25); "
                            "fix: use 25x25x25 CLIC ECAL files")
        if "target" in h5:
            source, raw = "target", h5["target"]
            if raw.ndim != 2 or raw.shape[1] < 2:
                raise DataError(f"data file {path}: dataset target has shape {raw.shape}, expected (N,>=2) with "
                                "the energy in column 1; fix: regenerate or repair the file")
            energy = np.asarray(raw[:, 1], dtype=np.float64)
            source = "target[:,1]"
        elif "energy" in h5:
            source, raw = "energy", h5["energy"]
            if raw.ndim not in (1, 2) or (raw.ndim == 2 and raw.shape[1] != 1):
                raise DataError(f"data file {path}: dataset energy has shape {raw.shape}, expected (N,); "
                                "fix: regenerate or repair the file")
            energy = np.asarray(raw[()], dtype=np.float64).reshape(-1)
        else:
            raise DataError(f"data file {path} has no energy: neither dataset target (energy in target[:,1]) "
                            f"nor dataset energy (datasets found: {names}); fix: {MAKE_DATA_HINT}")
        if len(energy) != ecal.shape[0]:
            raise DataError(f"data file {path}: dataset ECAL has {ecal.shape[0]} events but dataset {source} has "
                            f"{len(energy)}; fix: {MAKE_DATA_HINT}")
        if len(energy) and not (np.all(np.isfinite(energy)) and energy.min() > 0):
            raise DataError(f"data file {path}: dataset {source} holds non-finite or non-positive energies; "
                            f"fix: {MAKE_DATA_HINT}")
        if len(energy):
            try:  # the first and last events must decode (catches damaged chunks cheaply)
                ecal[0]
                ecal[len(energy) - 1]
            except (OSError, ValueError) as exc:
                raise DataError(f"data file {path}: dataset ECAL cannot be read ({exc}); "
                                f"fix: {MAKE_DATA_HINT}") from None
        return energy

    def read(self, file_index: int, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Raw ECAL cells of events [start, stop) of one file (one contiguous HDF5 read), into
        `out` (float32, stop-start events) without a temporary copy when given."""
        try:
            ecal = self._h5[file_index]["ECAL"]
            if out is None:
                return ecal[start:stop]
            ecal.read_direct(out, np.s_[start:stop])
            return out
        except (OSError, ValueError, TypeError) as exc:
            raise DataError(f"data file {self.paths[file_index]}: dataset ECAL events {start}..{stop} cannot "
                            f"be read ({exc}); fix: {MAKE_DATA_HINT}") from None

    def load(self, n: int | None = None, xscale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first n events (all when None) across the files, preprocessed (for validation)."""
        n = self.num_events if n is None else min(n, self.num_events)
        parts, energies = [], []
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

    def __enter__(self) -> "ShowerFiles":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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

    def __init__(self, files: ShowerFiles, *, batch_size: int, rank: int = 0, size: int = 1, seed: int = 0,
                 xscale: float = 1.0, shuffle: bool = True, drop_remainder: bool = True,
                 block_events: int | None = None, window_blocks: int = 8, prefetch_batches: int = 2):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not in [0, size={size})")
        self.files, self.batch_size, self.rank, self.size = files, batch_size, rank, size
        self.seed, self.xscale, self.shuffle, self.drop_remainder = seed, float(xscale), shuffle, drop_remainder
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
            raise DataError(f"data files {[str(p) for p in files.paths]} hold {files.num_events} events: fewer "
                            f"than {size} rank(s) x batch size {batch_size}; "
                            "fix: simulate more events or lower --batch-size")

    @property
    def max_buffer_events(self) -> int:
        """Events held at once by the stream and its consumer: window buffer and batches in flight."""
        return (self.window_blocks * self.block_events + self.batch_size  # the window buffer
                + (self.prefetch_batches + 3) * self.batch_size)  # queued, in-flight and consumer's batches

    def plan(self, epoch: int) -> list[tuple[int, int, int]]:
        """This rank's (file, start, stop) reads for an epoch, in reading order."""
        rng = np.random.default_rng([self.seed, epoch])
        blocks = []
        for k, count in enumerate(self.files.counts):
            phase = int(rng.integers(self.block_events)) if self.shuffle else 0
            edges = [0] + list(range(phase or self.block_events, count, self.block_events)) + [count]
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
        buffer = np.empty((self.window_blocks * self.block_events + self.batch_size, GRID, GRID, GRID), np.float32)
        energy = np.empty(len(buffer))
        carry = 0
        for w in range(0, len(pieces), self.window_blocks):
            fill = carry
            for k, a, b in pieces[w:w + self.window_blocks]:
                self.files.read(k, a, b, out=buffer[fill:fill + b - a])
                energy[fill:fill + b - a] = self.files.energies[k][a:b]
                fill += b - a
            order = rng.permutation(fill) if self.shuffle else np.arange(fill)
            full = fill // self.batch_size * self.batch_size
            for i in range(0, full, self.batch_size):
                take = order[i:i + self.batch_size]
                yield _preprocess_owned(buffer[take], energy[take], self.xscale)
            rest = order[full:]  # fewer than batch_size events carried to the front of the next window
            buffer[:len(rest)], energy[:len(rest)] = buffer[rest], energy[rest]
            carry = len(rest)
        if carry and not self.drop_remainder:
            yield preprocess(buffer[:carry], energy[:carry], self.xscale)

    def epoch(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Batches (images (B,25,25,25,1), Ep (B,), cell sum (B,)) float32 of one epoch for this rank."""
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
