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
        ckpts.save(state, gen, epoch, {"preset": "tiny", "seed": 0})
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
        ("[2]", ["holds a JSON list, expected an object"]),
        ('{"preset": "tiny"}', ["field 'epoch' is None"]),
        ('{"epoch": "two", "preset": "tiny"}', ["field 'epoch' is 'two'"]),
        ('{"epoch": true, "preset": "tiny"}', ["field 'epoch' is True"]),
        ('{"epoch": 2.0, "preset": "tiny"}', ["field 'epoch' is 2.0"]),
        ('{"epoch": 7, "preset": "tiny"}', ["field 'epoch' is 7 but the directory is epoch-0002"]),
        ('{"epoch": 2, "preset": ["tiny"]}', ["field 'preset' is ['tiny'], expected str"]),
        ('{"epoch": 2, "seed": "0"}', ["field 'seed' is '0', expected int"]),
        (
            '{"epoch": 2, "seed": 18446744073709551616}',
            ["field 'seed' is 18446744073709551616, expected 0..4294967295"],
        ),
        ('{"epoch": 2, "ranks": 0}', ["field 'ranks' is 0, expected 1..16777216"]),
        ('{"epoch": 2, "batch_size": -8}', ["field 'batch_size' is -8, expected 1.."]),
        (
            '{"epoch": 2, "steps_per_epoch": 1e400}',
            ["field 'steps_per_epoch' is inf, expected int"],
        ),
        (
            '{"epoch": 2, "steps_per_epoch": 100000000000000000000}',
            ["field 'steps_per_epoch' is 1000000"],
        ),
        (
            '{"epoch": 2, "run_id": "../../x"}',
            ["field 'run_id' is '../../x', expected 32 hex digits"],
        ),
        ('{"epoch": 2, "run_id": 7}', ["field 'run_id' is 7, expected str"]),
        ("[" * 100_000, ["unreadable checkpoint metadata"]),
        ('{"epoch": 2, "pad": "' + "x" * 70_000 + '"}', ["larger than"]),
    ],
)
def test_malformed_meta_json(saved, text: str, words: list[str]):
    ckpts, state = saved
    (ckpts.latest() / META).write_text(text)
    message = _restore_fails(ckpts, state, str(ckpts.latest() / META), *words)
    assert len(message) < 600


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
