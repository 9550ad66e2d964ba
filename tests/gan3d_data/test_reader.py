"""The shower reader on simulator output: preprocessing, sharding, reshuffling, bounded memory."""

import threading
import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest

from gan3d.data import DataError, ShowerFiles, ShowerStream, expand_data_arg
from tests.support.showers import write_id_files


def _ids(stream: ShowerStream, epoch: int) -> list[np.ndarray]:
    """Event ids (cell (0,0,0)) of every batch of one epoch."""
    return [images[:, 0, 0, 0, 0].astype(int) for images, _, _ in stream.epoch(epoch)]


def test_preprocessing_matches_the_reference(tmp_path: Path):
    raw = np.zeros((4, 25, 25, 25), np.float32)
    raw[:, 3, 4, 5] = [5e-7, 2e-6, 0.5, 1.5]
    raw[:, 12, 12, 12] = 1.0
    path = tmp_path / "old_layout.h5"
    with h5py.File(path, "w") as h5:  # older files: `energy` instead of `target`, float64 cells
        h5.create_dataset("ECAL", data=raw.astype(np.float64))
        h5.create_dataset("energy", data=np.array([10.0, 50.0, 200.0, 450.0]))
    files = ShowerFiles([path])
    batches = list(ShowerStream(files, batch_size=4, xscale=100.0, shuffle=False).epoch(0))
    assert len(batches) == 1
    images, ep, cellsum = batches[0]
    assert images.shape == (4, 25, 25, 25, 1)
    assert images.dtype == ep.dtype == cellsum.dtype == np.float32
    np.testing.assert_allclose(images[:, 3, 4, 5, 0], [0.0, 2e-4, 50.0, 150.0], rtol=1e-6)
    np.testing.assert_allclose(ep, [0.1, 0.5, 2.0, 4.5], rtol=1e-6)
    np.testing.assert_allclose(cellsum, images.reshape(4, -1).sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(cellsum, [100.0, 100.0002, 150.0, 250.0], rtol=1e-6)


def test_simulated_files_read_as_two_percent_showers(sim_dir: Path):
    files = ShowerFiles(expand_data_arg(str(sim_dir)))
    assert files.num_events == 1200 and files.counts == [400, 400, 400]
    images, ep, cellsum = next(iter(ShowerStream(files, batch_size=64, seed=3).epoch(0)))
    assert 0.1 <= ep.min() and ep.max() <= 5.0
    ratio = cellsum / (ep * 100.0)
    assert 0.015 < ratio.mean() < 0.025
    assert images.min() == 0.0 and not np.any((images > 0) & (images < 1e-6))


@pytest.mark.parametrize("size", [2, 3])
def test_ranks_get_disjoint_equal_shares(tmp_path: Path, size: int):
    files = ShowerFiles(write_id_files(tmp_path, [250, 300, 170]))
    streams = [
        ShowerStream(files, batch_size=16, rank=r, size=size, seed=11, block_events=40)
        for r in range(size)
    ]
    per_rank = [_ids(s, epoch=2) for s in streams]
    assert len({s.batches_per_epoch for s in streams}) == 1
    assert all(len(b) == streams[0].batches_per_epoch == 720 // size // 16 for b in per_rank)
    assert all(len(x) == 16 for b in per_rank for x in b)
    sets = [set(np.concatenate(b)) for b in per_rank]
    union = set().union(*sets)
    assert sum(len(s) for s in sets) == len(union)  # disjoint
    assert (
        union <= set(range(1, 721)) and 720 - len(union) < size * 16 + size
    )  # covering up to remainder


def test_epochs_reshuffle_deterministically(tmp_path: Path):
    files = ShowerFiles(write_id_files(tmp_path, [200, 200]))
    make = lambda seed: ShowerStream(
        files, batch_size=10, rank=1, size=2, seed=seed, block_events=25
    )  # noqa: E731
    e0, e1 = np.concatenate(_ids(make(1), 0)), np.concatenate(_ids(make(1), 1))
    assert np.array_equal(e0, np.concatenate(_ids(make(1), 0)))  # same (seed, epoch, rank, size)
    assert not np.array_equal(e0, e1)
    assert not np.array_equal(e0, np.concatenate(_ids(make(2), 0)))
    assert np.abs(np.diff(e0)).mean() > 5  # neighbours in a batch are not neighbours on disk


def test_keep_remainder_gives_a_last_partial_batch(tmp_path: Path):
    files = ShowerFiles(write_id_files(tmp_path, [105]))
    streams = [
        ShowerStream(files, batch_size=10, rank=r, size=2, drop_remainder=False) for r in range(2)
    ]
    batches = [_ids(s, 0) for s in streams]
    assert [len(b) for b in batches] == [6, 6] and streams[0].batches_per_epoch == 6
    assert [len(b[-1]) for b in batches] == [2, 2]
    assert len(set(np.concatenate(batches[0])) | set(np.concatenate(batches[1]))) == 104


def test_streaming_memory_is_bounded(sim_dir: Path):
    files = ShowerFiles(expand_data_arg(str(sim_dir)))
    stream = ShowerStream(files, batch_size=8, seed=1, block_events=32, window_blocks=2)
    event_bytes = 25**3 * 4
    assert stream.max_buffer_events == 2 * 32 + 8 + (2 + 3) * 8  # window buffer + batches in flight
    tracemalloc.start()
    try:
        count = sum(len(images) for images, _, _ in stream.epoch(0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 1200
    assert peak < stream.max_buffer_events * event_bytes + 1_000_000  # + small objects
    assert peak < 0.1 * files.num_events * event_bytes  # far from holding the data set


def test_read_ahead_thread_stops_when_the_consumer_stops(sim_dir: Path):
    files = ShowerFiles(expand_data_arg(str(sim_dir)))
    before = threading.active_count()
    batches = ShowerStream(files, batch_size=8).epoch(0)
    next(batches)
    batches.close()
    assert threading.active_count() == before


def test_expand_data_arg_forms(tmp_path: Path):
    for name in ("EleEscan_1_10.h5", "EleEscan_1_9.h5", "EleEscan_2_0.h5", "notes.txt"):
        (tmp_path / name).touch()
    by_dir = expand_data_arg(str(tmp_path))
    assert [p.name for p in by_dir] == ["EleEscan_1_9.h5", "EleEscan_1_10.h5", "EleEscan_2_0.h5"]
    assert expand_data_arg(str(tmp_path / "EleEscan_1_*.h5")) == by_dir[:2]
    listed = f"{tmp_path / 'EleEscan_2_0.h5'},{tmp_path / 'EleEscan_1_9.h5'}"
    assert [p.name for p in expand_data_arg(listed)] == ["EleEscan_2_0.h5", "EleEscan_1_9.h5"]
    with pytest.raises(DataError, match="no \\*.h5"):
        expand_data_arg(str(_empty(tmp_path)))
    with pytest.raises(DataError, match="matches no files"):
        expand_data_arg(str(tmp_path / "x_*.h5"))


def _empty(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


def test_too_few_events_for_the_ranks(tmp_path: Path):
    files = ShowerFiles(write_id_files(tmp_path, [10]))
    with pytest.raises(DataError, match="batch size 8"):
        ShowerStream(files, batch_size=8, size=2)
