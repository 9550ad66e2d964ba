"""Hostile or damaged shower files: refused at once with one line naming the file, dataset and fix.

Every file here is a real HDF5 file written by h5py (or a real FIFO/device); none is mocked.
Tests that would block forever on a reader that opens FIFOs carry a timeout.
"""

import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from gan3d.data import DataError, ShowerFiles, ShowerStream
from tests.support.showers import write_id_files


def _refused(path: Path, *words: str) -> str:
    with pytest.raises(DataError) as info:
        ShowerFiles([path])
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "fix:" in message, message
    for word in words:
        assert word in message, (word, message)
    return message


def _energy(n: int) -> np.ndarray:
    return np.stack([np.full(n, 11.0), np.linspace(10, 500, n)], axis=1)


def _file(path: Path, build) -> Path:
    with h5py.File(path, "w") as h5:
        build(h5)
    return path


@pytest.mark.timeout(60, method="thread")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path):
    fifo = tmp_path / "EleEscan_1_0.h5"
    os.mkfifo(fifo)
    _refused(fifo, "is a FIFO, not a regular file")


@pytest.mark.timeout(60, method="thread")
def test_dev_zero_behind_a_symlink_is_refused(tmp_path: Path):
    link = tmp_path / "EleEscan_1_0.h5"
    link.symlink_to("/dev/zero")
    _refused(link, "is a character device")


def test_a_directory_named_like_a_file_is_refused(tmp_path: Path):
    (tmp_path / "x.h5").mkdir()
    _refused(tmp_path / "x.h5", "is a directory")


def test_soft_links_are_followed_inside_the_file_but_a_loop_is_refused(tmp_path: Path):
    def inside(h5):
        h5.create_dataset("showers/cells", data=np.ones((3, 25, 25, 25), np.float32))
        h5["ECAL"] = h5py.SoftLink("/showers/cells")
        h5["target"] = h5py.SoftLink("t")
        h5["t"] = _energy(3)

    with ShowerFiles([_file(tmp_path / "soft.h5", inside)]) as files:
        assert files.counts == [3] and files.read(0, 0, 3).sum() == 3 * 25**3

    def build(h5):
        h5["ECAL"] = h5py.SoftLink("/a")
        h5["a"] = h5py.SoftLink("/ECAL")
        h5["target"] = _energy(2)

    _refused(_file(tmp_path / "loop.h5", build), "dataset ECAL", "loop")


def test_dangling_soft_link(tmp_path: Path):
    def build(h5):
        h5["ECAL"] = h5py.SoftLink("/gone/ECAL")
        h5["target"] = _energy(2)

    _refused(_file(tmp_path / "dangling.h5", build), "dataset ECAL", "dangling")


def test_external_link_to_a_missing_file(tmp_path: Path):
    def build(h5):
        h5["ECAL"] = h5py.ExternalLink("missing.h5", "/ECAL")
        h5["target"] = _energy(2)

    _refused(_file(tmp_path / "ext.h5", build), "dataset ECAL", "external link")


@pytest.mark.timeout(60, method="thread")
def test_external_link_to_a_fifo_is_refused_without_opening_it(tmp_path: Path):
    os.mkfifo(tmp_path / "pipe.h5")

    def build(h5):
        h5["ECAL"] = h5py.ExternalLink(str(tmp_path / "pipe.h5"), "/ECAL")
        h5["target"] = _energy(2)

    _refused(_file(tmp_path / "ext.h5", build), "external link")


@pytest.mark.timeout(60, method="thread")
def test_external_raw_storage_is_refused(tmp_path: Path):
    os.mkfifo(tmp_path / "cells.raw")

    def build(h5):
        h5.create_dataset(
            "ECAL",
            (2, 25, 25, 25),
            np.float32,
            external=[(str(tmp_path / "cells.raw"), 0, h5py.h5f.UNLIMITED)],
        )
        h5["target"] = _energy(2)

    _refused(_file(tmp_path / "raw.h5", build), "dataset ECAL", "other files")


@pytest.mark.parametrize("kind", ["group", "string", "compound"])
def test_ecal_of_the_wrong_kind(tmp_path: Path, kind: str):
    def build(h5):
        if kind == "group":
            h5.create_group("ECAL").create_dataset("x", data=[1.0])
        elif kind == "string":
            h5.create_dataset("ECAL", data=np.full((2, 25, 25, 25), b"1", "S1"))
        else:
            h5.create_dataset("ECAL", data=np.zeros((2, 25, 25, 25), [("e", "f4"), ("t", "f4")]))
        h5["target"] = _energy(2)

    words = {"group": ["ECAL is a group"], "string": ["dtype |S1"], "compound": ["dtype", "('e'"]}[
        kind
    ]
    _refused(_file(tmp_path / f"{kind}.h5", build), *words)


@pytest.mark.parametrize("kind", ["string", "compound"])
def test_target_of_the_wrong_dtype(tmp_path: Path, kind: str):
    def build(h5):
        h5["ECAL"] = np.zeros((2, 25, 25, 25), np.float32)
        if kind == "string":
            h5["target"] = np.array([[b"e-", b"ten"], [b"e-", b"five"]])
        else:
            h5["target"] = np.zeros((2, 2), [("e", "f8"), ("pid", "i4")])

    _refused(_file(tmp_path / f"{kind}.h5", build), "dataset target", "dtype")


def test_absurd_chunk_shape_is_refused_before_a_chunk_is_decoded(tmp_path: Path):
    def build(h5):
        h5.create_dataset(
            "ECAL",
            (3, 25, 25, 25),
            np.float32,
            maxshape=(None, 25, 25, 25),
            chunks=(20_000, 25, 25, 25),
            compression="gzip",
        )
        h5["target"] = _energy(3)

    from gan3d.showerfile import MAX_CHUNK_BYTES

    path = _file(tmp_path / "chunk.h5", build)
    assert 20_000 * 25**3 * 4 > MAX_CHUNK_BYTES
    _refused(path, "dataset ECAL", "chunks of shape (20000, 25, 25, 25)")


def test_a_tiny_file_declaring_1e11_events_is_refused_before_reading(tmp_path: Path):
    def build(h5):
        h5.create_dataset("ECAL", (10**11, 25, 25, 25), np.float32, chunks=(1, 25, 25, 25))
        h5.create_dataset("target", (10**11, 2), np.float64, chunks=(1024, 2))

    path = _file(tmp_path / "huge.h5", build)
    assert path.stat().st_size < 10_000
    _refused(path, "dataset ECAL declares 100000000000 events")


def test_declared_events_without_stored_chunks_are_refused(tmp_path: Path):
    def build(h5):
        ecal = h5.create_dataset("ECAL", (100, 25, 25, 25), np.float32, chunks=(10, 25, 25, 25))
        ecal[:10] = 1.0  # only the first of ten chunks is ever written
        h5["target"] = _energy(100)

    _refused(
        _file(tmp_path / "partial.h5", build), "dataset ECAL", "stores only 1 of its 10 chunks"
    )


def test_nan_cells_are_refused_naming_the_file_and_event(tmp_path: Path):
    path = write_id_files(tmp_path, [100])[0]
    with h5py.File(path, "r+") as h5:
        h5["ECAL"][57, 3, 4, 5] = np.nan
    files = ShowerFiles([path])  # the first and last events are fine: found when read, not before
    with pytest.raises(DataError) as info:
        for _ in ShowerStream(files, batch_size=10, shuffle=False, block_events=20).epoch(0):
            pass
    message = str(info.value)
    assert f"data file {path}: dataset ECAL event 57 holds NaN or Inf cells" in message
    assert "--skip-bad-events" in message and "\n" not in message


def test_inf_in_the_first_event_is_refused_at_once(tmp_path: Path):
    path = write_id_files(tmp_path, [10])[0]
    with h5py.File(path, "r+") as h5:
        h5["ECAL"][0, 0, 0, 1] = -np.inf
    _refused(path, "dataset ECAL event 0 holds NaN or Inf cells")


@pytest.mark.parametrize("value", [np.inf, -5.0, 0.0])
def test_bad_target_energies_name_the_event(tmp_path: Path, value: float):
    path = write_id_files(tmp_path, [10])[0]
    with h5py.File(path, "r+") as h5:
        h5["target"][6, 1] = value
    _refused(path, "dataset target[:,1] event 6 holds the energy", "--skip-bad-events")


def test_skip_bad_events_leaves_exactly_the_bad_events_out(tmp_path: Path):
    paths = write_id_files(tmp_path, [40, 30])  # event k carries id k+1 in cell (0,0,0)
    with h5py.File(paths[0], "r+") as h5:
        h5["ECAL"][3, 5, 5, 5] = np.nan
        h5["ECAL"][39, 1, 1, 1] = np.inf  # the last event
        h5["target"][8, 1] = -1.0
        h5["target"][11, 1] = np.nan
    with h5py.File(paths[1], "r+") as h5:
        h5["ECAL"][0, 2, 2, 2] = np.nan  # the first event
    with ShowerFiles(paths, skip_bad_events=True) as files:
        assert files.skipped == [4, 1] and files.skipped_events == 5
        assert files.counts == [36, 29] and files.num_events == 65
        expected = sorted(set(range(1, 71)) - {4, 40, 9, 12, 41})
        seen = [
            int(x)
            for images, _, _ in ShowerStream(files, batch_size=5, shuffle=False).epoch(0)
            for x in images[:, 0, 0, 0, 0]
        ]
        assert seen == expected
        assert files.read(0, 2, 10)[:, 0, 0, 0].tolist() == [3, 5, 6, 7, 8, 10, 11, 13]
        assert np.all(np.isfinite(files.energies[0])) and len(files.energies[0]) == 36
