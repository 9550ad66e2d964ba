"""`--test-fraction` holds out a share of the EVENTS: whole files when enough files fit the share,
else a range of every file; the same on every rank (from the seed), disjoint from training, and
the training shards of the ranks still disjoint. Real HDF5 files whose events carry their ids."""

import math
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gan3d.data import (
    HELD_OUT_TOLERANCE,
    DataError,
    ShowerStream,
    expand_data_arg,
    open_split,
    split_events,
)
from tests.support.showers import write_id_files

POOL_SIZES = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233]


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> list[Path]:
    """Real id files of many sizes, from which the property test builds data sets."""
    return write_id_files(tmp_path_factory.mktemp("pool"), POOL_SIZES)


def _ids(view) -> list[tuple[int, int]]:
    """(file index, usable event) of every event of a training or held-out set."""
    return [(k, u) for k, a, b in view.ranges for u in range(a, b)]


def _read_ids(stream: ShowerStream) -> np.ndarray:
    """The ids (cell (0,0,0), see write_id_files) of every event one rank reads in epoch 0."""
    return np.concatenate([images[:, 0, 0, 0, 0] for images, _, _ in stream.epoch(0)]).astype(int)


@given(
    picks=st.lists(st.integers(0, len(POOL_SIZES) - 1), min_size=1, max_size=10),
    fraction=st.floats(0.01, 0.99),
    seed=st.integers(0, 2**32 - 1),
    ranks=st.integers(1, 4),
)
def test_the_split_is_a_partition_of_the_events_and_the_rank_shards_too(
    pool, picks, fraction, seed, ranks
):
    paths = [pool[i] for i in picks]  # a file may come twice: a data set of those sizes
    counts = [POOL_SIZES[i] for i in picks]
    total = sum(counts)
    if total < 2:
        with pytest.raises(DataError, match="too few to hold out"):
            open_split(paths, None, fraction=fraction, seed=seed)
        return
    train, test, record = open_split(paths, None, fraction=fraction, seed=seed)
    everything = {(k, u) for k, c in enumerate(counts) for u in range(c)}
    train_ids, test_ids = _ids(train), _ids(test)
    assert len(set(train_ids)) == len(train_ids) and len(set(test_ids)) == len(test_ids)
    assert set(train_ids) | set(test_ids) == everything and not set(train_ids) & set(test_ids)
    target = min(total - 1, max(1, math.floor(fraction * total + 0.5)))
    if record["by"] == "events":
        assert len(test_ids) == target
    else:  # whole files, close to the asked count, at least one on each side
        assert record["by"] == "files" and all(a == 0 and b == counts[k] for k, a, b in test.ranges)
        assert abs(len(test_ids) - target) <= HELD_OUT_TOLERANCE * target
        assert train.num_events > 0
    assert record["events"] == len(test_ids) and record["of_events"] == total
    again = open_split(
        paths, None, fraction=fraction, seed=seed
    )  # another rank, opening the same files
    assert again[2] == record and again[0].ranges == train.ranges
    if train.num_events < ranks:
        return
    shards = []
    for rank in range(ranks):
        stream = ShowerStream(
            train, batch_size=1, rank=rank, size=ranks, seed=seed, prefetch_batches=0
        )
        shards.append(
            [
                (train.ranges[i][0], train.ranges[i][1] + u)
                for i, a, b in stream.plan(3)
                for u in range(a, b)
            ]
        )
    assert len({len(s) for s in shards}) == 1  # the same number of steps on every rank
    flat = [e for s in shards for e in s]
    assert len(flat) == len(set(flat)) and set(flat) <= set(
        train_ids
    )  # disjoint, never a held-out event
    assert len(train_ids) - len(flat) < ranks  # covering all but the remainder


def test_two_files_hold_out_a_tenth_of_their_events_not_a_file(tmp_path: Path):
    """`--synthetic 256` writes two files of 128 showers: 26 are held out, from both files."""
    paths = write_id_files(tmp_path, [128, 128])
    train, test, record = open_split(paths, None, fraction=0.1, seed=0)
    assert (
        record["by"] == "events"
        and record["events"] == test.num_events == 26
        and train.num_events == 230
    )
    assert sorted(s["file"] for s in record["source"]) == [str(p) for p in paths]
    ranks = 2
    held = [
        _read_ids(ShowerStream(test, batch_size=4, rank=r, size=ranks, shuffle=False))
        for r in range(ranks)
    ]
    trained = [
        _read_ids(ShowerStream(train, batch_size=4, rank=r, size=ranks, seed=0))
        for r in range(ranks)
    ]
    described = {
        1 + 128 * paths.index(Path(s["file"])) + e
        for s in record["source"]
        for e in range(s["first"], s["stop"])
    }
    assert len(described) == 26
    for ids in held:
        assert set(ids) <= described
    assert not set(held[0]) & set(held[1]) and not set(trained[0]) & set(trained[1])
    assert not (set(trained[0]) | set(trained[1])) & described
    other = open_split(paths, None, fraction=0.1, seed=1)[2]
    assert (
        other["events"] == 26 and other["source"] != record["source"]
    )  # the seed picks the ranges


def test_ten_files_hold_out_one_whole_file_picked_by_the_seed(tmp_path: Path):
    paths = write_id_files(tmp_path, [40] * 10)
    picked = set()
    for seed in range(5):
        train, test, record = open_split(paths, None, fraction=0.1, seed=seed)
        assert record["by"] == "files" and record["events"] == 40 and len(record["source"]) == 1
        source = record["source"][0]
        assert (source["first"], source["stop"]) == (0, 40)
        assert source["file"] not in [str(p) for p in train.paths]
        picked.add(source["file"])
    assert len(picked) > 1


def test_skipped_bad_events_are_shared_out_and_spans_name_stored_events(tmp_path: Path):
    paths = write_id_files(tmp_path, [60, 60])
    with h5py.File(paths[0], "r+") as h5:
        for event in (0, 17, 18, 59):
            h5["ECAL"][event, 12, 12, 3] = np.nan
    train, test, record = open_split(paths, None, fraction=0.3, seed=4, skip_bad_events=True)
    assert train.skipped_events + test.skipped_events == 4
    assert record["by"] == "events" and record["events"] == 35  # round(0.3 x 116)
    for index, source in enumerate(record["source"]):
        k, a, b = test.ranges[index]
        ids = test.read(index, 0, b - a)[:, 0, 0, 0].astype(int)
        first_id = 1 + 60 * k + source["first"]
        assert (
            ids[0] == first_id and ids[-1] == 60 * k + source["stop"]
        )  # HDF5 indices, bad ones counted


def test_validation_data_is_used_whole_and_said_so(tmp_path: Path):
    paths = write_id_files(tmp_path, [30, 20])
    train, test, record = open_split(paths[:1], paths[1:], fraction=0.1, seed=0)
    assert (train.num_events, test.num_events) == (30, 20)
    assert record == {
        "by": "validation-data",
        "events": 20,
        "source": [{"file": str(paths[1]), "events": 20}],
    }


def test_a_missing_path_is_not_found(tmp_path: Path):
    missing = tmp_path / "missing"
    with pytest.raises(DataError, match=f"^not found: {missing} "):
        expand_data_arg(str(missing))
    with pytest.raises(DataError, match="not found: "):
        expand_data_arg(f"{write_id_files(tmp_path, [3])[0]},{missing}.h5")


def test_fractions_outside_zero_and_one_are_refused():
    for fraction in (0.0, 1.0, -0.1):
        with pytest.raises(DataError, match="--test-fraction"):
            split_events([10, 10], fraction, 0)


def test_too_few_held_out_events_for_the_ranks_name_the_fraction(tmp_path: Path):
    train, test, _ = open_split(write_id_files(tmp_path, [24, 24]), None, fraction=0.1, seed=0)
    assert test.num_events == 5
    with pytest.raises(
        DataError,
        match=r"^the events held out by --test-fraction 0.1 hold 5 events: "
        r"fewer than 2 rank\(s\) x batch size 4; fix: raise --test-fraction",
    ):
        ShowerStream(test, batch_size=4, size=2)
    assert ShowerStream(train, batch_size=4, size=2).batches_per_epoch == 43 // 2 // 4
