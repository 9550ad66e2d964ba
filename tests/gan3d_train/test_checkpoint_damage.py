"""Checkpoints written by the code, then damaged: refused with one CheckpointError line, never a hang.

TensorFlow in-process, no MPI. Tests that would block on a FIFO with a careless reader carry a timeout.
"""

import json
import os
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gan3d.checkpoint import META, META_BOUNDS, CheckpointError, EpochCheckpoints
from tests.support.checkpoints import generator_state

DATA = "state.data-00000-of-00001"


@pytest.fixture
def saved(tmp_path: Path):
    """A real directory of two checkpoints (epochs 1 and 2) and the state they restore into."""
    gen, state = generator_state()
    ckpts = EpochCheckpoints(tmp_path / "ckpt", keep=3)
    for epoch in (1, 2):
        ckpts.save(state, gen, epoch, meta={"preset": "tiny", "seed": 0})
    return ckpts, state


def _restore_fails(ckpts: EpochCheckpoints, state, *words: str) -> str:
    with pytest.raises(CheckpointError) as info:
        ckpts.restore(state, ckpts.latest(), {"preset": "tiny"})
    message = str(info.value)
    assert "\n" not in message and "fix:" in message, message
    for word in words:
        assert word in message, (word, message)
    return message


def test_missing_index(saved):
    ckpts, state = saved
    (ckpts.latest() / "state.index").unlink()
    _restore_fails(ckpts, state, str(ckpts.latest() / "state.index"), "missing")


def test_truncated_data(saved):
    ckpts, state = saved
    data = ckpts.latest() / DATA
    with open(data, "r+b") as fh:
        fh.truncate(data.stat().st_size // 2)
    _restore_fails(ckpts, state, str(ckpts.latest() / "state"), "cannot be read", "epoch-0002")


@pytest.mark.timeout(60, method="thread")
def test_a_fifo_as_state_data_is_refused_before_tensorflow_opens_it(saved):
    ckpts, state = saved
    data = ckpts.latest() / DATA
    data.unlink()
    os.mkfifo(data)
    _restore_fails(ckpts, state, str(data), "not a regular file")


@pytest.mark.timeout(60, method="thread")
def test_a_fifo_as_meta_json_is_refused_not_skipped(saved):
    ckpts, _ = saved
    meta = ckpts.latest() / META
    meta.unlink()
    os.mkfifo(meta)
    assert ckpts.latest().name == "epoch-0002"  # not silently the older one
    with pytest.raises(
        CheckpointError, match="meta.json: is a FIFO, not a regular file; fix: delete"
    ):
        EpochCheckpoints.read_meta(ckpts.latest())


@pytest.mark.timeout(60, method="thread")
def test_dev_zero_linked_as_meta_json_is_refused(saved):
    ckpts, _ = saved
    meta = ckpts.latest() / META
    meta.unlink()
    meta.symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match="is a symlink"):
        EpochCheckpoints.read_meta(ckpts.latest())


def test_a_name_with_a_trailing_newline_is_not_a_checkpoint(saved):
    ckpts, _ = saved
    fake = ckpts.directory / "epoch-0009\n"
    fake.mkdir()
    (fake / META).write_text('{"epoch": 9}')
    assert ckpts.latest().name == "epoch-0002"


@pytest.mark.parametrize(
    "text, words",
    [
        (
            '{"epoch": 0, "seed": -1, "run_id": "x"}',
            [
                "invalid checkpoint metadata (3 problem(s))",
                "epoch: must be at least 1, got 0",
                "seed: must be at least 0, got -1",
                "run_id: 'x' is not 32 hex digits",
            ],
        ),
        ("[2]", ["(top level): expected a mapping with keys epoch"]),
        ('{"preset": "tiny"}', ["epoch: missing required key (an integer)"]),
        ('{"epoch": "two", "preset": "tiny"}', ["epoch: expected an integer, got str 'two'"]),
        ('{"epoch": true, "preset": "tiny"}', ["epoch: expected an integer, got bool True"]),
        ('{"epoch": 2.0, "preset": "tiny"}', ["epoch: expected an integer, got float 2.0"]),
        ('{"epoch": 7, "preset": "tiny"}', ["epoch: 7 but the directory is epoch-0002"]),
        ('{"epoch": 2, "preset": ["tiny"]}', ["preset: expected a string, got list ['tiny']"]),
        ('{"epoch": 2, "seed": "0"}', ["seed: expected an integer, got str '0'"]),
        (
            '{"epoch": 2, "seed": 18446744073709551616}',
            ["seed: must be at most 4294967295, got 18446744073709551616"],
        ),
        ('{"epoch": 2, "ranks": 0}', ["ranks: must be at least 1, got 0"]),
        ('{"epoch": 2, "batch_size": -8}', ["batch_size: must be at least 1, got -8"]),
        (
            '{"epoch": 2, "steps_per_epoch": 1e400}',
            ["steps_per_epoch: expected an integer, got float inf"],
        ),
        (
            '{"epoch": 2, "steps_per_epoch": 100000000000000000000}',
            ["steps_per_epoch: must be at most 1099511627776, got 1000000"],
        ),
        (
            '{"epoch": 2, "run_id": "../../x"}',
            ["run_id: '../../x' is not 32 hex digits"],
        ),
        ('{"epoch": 2, "run_id": 7}', ["run_id: expected a string, got int 7"]),
        ("[" * 100_000, ["unreadable checkpoint metadata"]),
        ('{"epoch": 2, "pad": "' + "x" * 70_000 + '"}', ["larger than"]),
    ],
)
def test_malformed_meta_json(saved, text: str, words: list[str]):
    ckpts, state = saved
    (ckpts.latest() / META).write_text(text)
    message = _restore_fails(ckpts, state, str(ckpts.latest() / META), *words)
    assert len(message) < 300 + 4 * len(str(ckpts.latest() / META))  # the file named per problem


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_meta = st.one_of(
    st.dictionaries(
        st.sampled_from(["epoch", "preset", "seed", "ranks", "steps_per_epoch", "run_id", "x"]),
        _json,
        max_size=5,
    ),
    st.fixed_dictionaries(
        {"epoch": st.one_of(st.integers(-3, 5), _json)},
        optional={"preset": _json, "seed": _json, "batch_size": _json},
    ),
    _json,
)


@given(
    content=st.one_of(
        _meta.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=64),
        st.text(max_size=64).map(str.encode),
    )
)
@example(content=b"[" * 50_000)
@example(content=b'{"epoch": 1e999}')
@example(content=b'{"epoch": ' + b"9" * 5000 + b"}")
@example(content=b"\xff\xfe{")
def test_any_meta_json_is_read_or_refused_cleanly(tmp_path_factory, content: bytes):
    """Whatever meta.json holds: a dict with an int epoch matching the name, or one CheckpointError
    line.
    """
    path = tmp_path_factory.mktemp("meta") / "epoch-0002"
    path.mkdir()
    (path / META).write_bytes(content)
    try:
        meta = EpochCheckpoints.read_meta(path)
    except CheckpointError as exc:
        assert "\n" not in str(exc) and str(path / META) in str(exc) and "fix:" in str(exc)
    else:
        assert isinstance(meta, dict) and meta["epoch"] == 2 and type(meta["epoch"]) is int
        for key, (low, high) in META_BOUNDS.items():  # every number bounded as it is read
            assert key not in meta or (type(meta[key]) is int and low <= meta[key] <= high), (
                key,
                meta,
            )
