"""Open one CLIC shower file and check its layout before reading any event from it.

A shower file comes from elsewhere and may be damaged or hostile, so nothing in it is trusted
until checked, and every check is bounded: only regular files are opened (a FIFO would block);
links are followed only inside the file and at most MAX_LINK_HOPS times (external links, external
raw storage and virtual datasets would make HDF5 open files nobody checked); the declared shape
is bounded and must be backed by stored chunks (a 1 KB file declaring 1e11 events is refused
before an array is allocated); the chunk size is bounded (one chunk is decoded whole); dtypes
must be numeric. Every problem is a DataError of one line naming the file, the dataset and a fix.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

import numpy as np

from gan3d.files import NotRegularFile, open_regular
from kit.excerpt import one_line

GRID = 25
MAX_EVENTS_PER_FILE = 10_000_000  # 625 GB of cells; real CLIC files hold 10,000
MAX_CHUNK_BYTES = 256 * 2**20  # HDF5 decodes a whole chunk to read one event of it
MAX_LINK_HOPS = 16  # HDF5's own default limit on soft-link traversal
NUMERIC_KINDS = "fiu"
MAKE_DATA_HINT = "regenerate it (python -m gan3d simulate --out DIR) or re-copy it from the source"
LAYOUT_HINT = "use CLIC-layout files (ECAL (N,25,25,25) plus target or energy)"


class DataError(Exception):
    """A data file or argument that cannot be used; the message names the file, dataset and fix."""


def open_checked(path: Path):
    """(open h5py.File, ECAL dataset, energies in GeV (float64, unchecked values), energy
    source).
    """
    h5 = _open_h5(path)
    try:
        return (h5, *_layout(h5, path))
    except (
        KeyError,
        RuntimeError,
        OSError,
        ValueError,
        TypeError,
    ) as exc:  # h5py on damaged metadata
        h5.close()
        raise DataError(
            f"data file {path}: its HDF5 structure cannot be read ({type(exc).__name__}: "
            f"{one_line(exc)}); fix: {MAKE_DATA_HINT}"
        ) from None
    except BaseException:
        h5.close()
        raise


def _open_h5(path: Path):
    """h5py.File of the regular file at path; a DataError naming the file otherwise."""
    import h5py

    try:
        fd = open_regular(path)
    except FileNotFoundError:
        raise DataError(
            f"data file {path} does not exist (expected HDF5 with datasets ECAL and target); "
            "fix: check --data or run `python -m gan3d simulate --out DIR`"
        ) from None
    except NotRegularFile as exc:
        raise DataError(
            f"data file {path} is {exc.kind}, not a regular file, so dataset ECAL cannot be read; "
            "fix: point --data at the HDF5 shower files themselves"
        ) from None
    except OSError as exc:
        raise DataError(
            f"data file {path} cannot be opened ({exc.strerror}); "
            "fix: check the path and its permissions"
        ) from None
    try:  # HDF5 opens the very file checked above, not whatever the path names by now
        name = f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else str(path)
        try:
            h5 = h5py.File(name, "r")
        except OSError as exc:
            reason = one_line(exc).replace(name, str(path))
            kind = "is not an HDF5 file" if not h5py.is_hdf5(name) else "is truncated or corrupt"
            raise DataError(
                f"data file {path} {kind}, so dataset ECAL cannot be read ({reason}); "
                f"fix: {MAKE_DATA_HINT}"
            ) from None
    finally:
        os.close(fd)
    return h5


def declared_events(path: Path) -> int:
    """The events a shower file's ECAL dataset declares, from its header alone (no event or energy
    is read): an upper bound on what training can use, cheap enough to check many files before a
    job is queued. The same link, shape and bound checks as open_checked."""
    h5 = _open_h5(path)
    try:
        return int(_ecal(h5, path).shape[0])
    except (
        KeyError,
        RuntimeError,
        OSError,
        ValueError,
        TypeError,
    ) as exc:  # h5py on damaged metadata
        raise DataError(
            f"data file {path}: its HDF5 structure cannot be read ({type(exc).__name__}: "
            f"{one_line(exc)}); fix: {MAKE_DATA_HINT}"
        ) from None
    finally:
        h5.close()


def _ecal(h5, path: Path):
    """The ECAL dataset, checked to be (N,25,25,25) with N within MAX_EVENTS_PER_FILE."""
    ecal = _dataset(h5, path, "ECAL")
    if ecal is None:
        raise DataError(
            f"data file {path} has no dataset ECAL (datasets found: {_names(h5)}); fix: {LAYOUT_HINT}"
        )
    if ecal.ndim != 4 or tuple(ecal.shape[1:]) != (GRID, GRID, GRID):
        raise DataError(
            f"data file {path}: dataset ECAL has shape {ecal.shape}, expected (N,25,25,25); "
            "fix: use 25x25x25 CLIC ECAL files"
        )
    if ecal.shape[0] > MAX_EVENTS_PER_FILE:
        raise DataError(
            f"data file {path}: dataset ECAL declares {ecal.shape[0]} events, "
            f"more than the {MAX_EVENTS_PER_FILE} a shower file may hold; fix: {MAKE_DATA_HINT}"
        )
    return ecal


def _layout(h5, path: Path):
    ecal = _ecal(h5, path)
    events = ecal.shape[0]
    _check_dataset(ecal, path, "ECAL")
    if h5.get("target", getlink=True) is not None:
        raw, source = _dataset(h5, path, "target"), "target[:,1]"
        if raw.ndim != 2 or raw.shape[1] < 2:
            raise DataError(
                f"data file {path}: dataset target has shape {raw.shape}, expected (N,>=2) "
                "with the energy in column 1; fix: regenerate or repair the file"
            )
    elif h5.get("energy", getlink=True) is not None:
        raw, source = _dataset(h5, path, "energy"), "energy"
        if raw.ndim not in (1, 2) or (raw.ndim == 2 and raw.shape[1] != 1):
            raise DataError(
                f"data file {path}: dataset energy has shape {raw.shape}, expected (N,); "
                "fix: regenerate or repair the file"
            )
    else:
        raise DataError(
            f"data file {path} has no energy: "
            "neither dataset target (energy in target[:,1]) nor dataset energy (datasets found: "
            f"{_names(h5)}); fix: {MAKE_DATA_HINT}"
        )
    if raw.shape[0] != events:  # compared before reading, so a huge declared length is never read
        raise DataError(
            f"data file {path}: "
            f"dataset ECAL has {events} events but dataset {source} has {raw.shape[0]}; fix: {MAKE_DATA_HINT}"
        )
    _check_dataset(raw, path, source.split("[")[0])
    energy = np.asarray(
        raw[:, 1] if source == "target[:,1]" else raw[()], dtype=np.float64
    ).reshape(-1)
    return ecal, energy, source


def _names(h5) -> list[str]:
    """The first few names in the root group (a file may hold millions)."""
    names = list(itertools.islice(h5, 11))
    return sorted(names[:10]) + (["..."] if len(names) > 10 else [])


def _dataset(h5, path: Path, name: str):
    """The dataset linked as /name (None if no such link), following soft links inside the file
    only.
    """
    import h5py

    if h5.get(name, getlink=True) is None:
        return None
    node, parts, hops = h5, [name], 0
    while parts:
        part = parts.pop(0)
        if not isinstance(node, h5py.Group):
            raise DataError(
                f"data file {path}: the link to dataset {name} passes through {node.name!r}, "
                f"which is not a group; fix: {MAKE_DATA_HINT}"
            )
        link = node.get(part, getlink=True)
        if link is None:
            raise DataError(
                f"data file {path}: "
                f"dataset {name} is a dangling link (nothing at {part!r} in {node.name!r}); fix: "
                f"{MAKE_DATA_HINT}"
            )
        if isinstance(link, h5py.SoftLink):
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise DataError(
                    f"data file {path}: "
                    f"dataset {name} is a soft link that does not end after {MAX_LINK_HOPS} links (a loop); "
                    f"fix: {MAKE_DATA_HINT}"
                )
            target = link.path
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            node = h5 if target.startswith("/") else node
            continue
        if not isinstance(link, h5py.HardLink):
            raise DataError(
                f"data file {path}: dataset {name} is an external link ({link!r}); "
                f"shower data must be inside the file itself; fix: {MAKE_DATA_HINT}"
            )
        node = node[part]
    if not isinstance(node, h5py.Dataset):
        kind = "group" if isinstance(node, h5py.Group) else "named datatype"
        raise DataError(f"data file {path}: {name} is a {kind}, not a dataset; fix: {LAYOUT_HINT}")
    return node


def _check_dataset(ds, path: Path, name: str) -> None:
    """Numeric dtype, data stored in this file, chunks of bounded size, every chunk present."""
    where = f"data file {path}: dataset {name}"
    if ds.dtype.kind not in NUMERIC_KINDS:
        raise DataError(
            f"{where} has dtype {ds.dtype}, expected numbers (float or int); fix: {LAYOUT_HINT}"
        )
    plist = ds.id.get_create_plist()
    if ds.is_virtual or plist.get_external_count():
        raise DataError(
            f"{where} keeps its data in other files (virtual or external storage); "
            f"shower data must be inside the file itself; fix: {MAKE_DATA_HINT}"
        )
    itemsize, shape = ds.dtype.itemsize, ds.shape
    if ds.chunks:
        chunk_bytes = math.prod(ds.chunks) * itemsize
        if chunk_bytes > MAX_CHUNK_BYTES:
            raise DataError(
                f"{where} has chunks of shape {ds.chunks} ({chunk_bytes} bytes each, "
                f"more than {MAX_CHUNK_BYTES}); fix: rewrite it with smaller chunks, e.g. (64,25,25,25)"
            )
        expected = math.prod(math.ceil(s / c) for s, c in zip(shape, ds.chunks))
        stored = ds.id.get_num_chunks()
        if stored < expected:
            raise DataError(
                f"{where} declares shape {shape} but stores only {stored} of its {expected} chunks "
                f"(an unfinished or forged file); fix: {MAKE_DATA_HINT}"
            )
    else:
        need, stored = math.prod(shape) * itemsize, ds.id.get_storage_size()
        if stored < need:
            raise DataError(
                f"{where} declares shape {shape} ({need} bytes) "
                f"but stores {stored} bytes (an unfinished or forged file); fix: {MAKE_DATA_HINT}"
            )
