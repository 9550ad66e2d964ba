"""The remote receiver in a shared, hostile upload directory: links planted at the names it
writes, FIFOs where it expects files, garbage state files, names that climb out. Driven over
local pipes exactly as sshd drives it (see test_receiver.receive)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.receiver import (
    BOUND,
    DATA,
    one_error_line,
    probe_argv,
    receive_argv,
    stdin_for,
)

EXIT_REFUSED = 8


@pytest.mark.parametrize(
    "planted",
    [".img.tar.gz.part", ".img.tar.gz.part.state", "img.tar.gz", ".img.tar.gz.part.state.tmp"],
)
@pytest.mark.parametrize("target", ["canary", "missing"])
def test_a_link_planted_at_a_receiver_name_is_not_followed(tmp_path, planted, target):
    up, canary = tmp_path / "up", tmp_path / target
    up.mkdir()
    if target == "canary":
        canary.write_bytes(b"canary")
    (up / planted).symlink_to(canary)
    res = subprocess.run(
        receive_argv(up), input=stdin_for(DATA), capture_output=True, timeout=BOUND
    )
    assert (up / planted).is_symlink() and os.readlink(up / planted) == str(canary), (
        "the link stays"
    )
    if target == "canary":
        assert canary.read_bytes() == b"canary"
    else:
        assert not canary.exists() and not canary.is_symlink(), (
            "nothing is created through the link"
        )
    if planted.endswith(".tmp"):  # not a name this receiver uses: the upload goes on beside it
        assert res.returncode == 0, res.stderr
        assert (up / "img.tar.gz").read_bytes() == DATA
    else:
        assert res.returncode == EXIT_REFUSED
        assert planted in one_error_line(res.stderr) and "symlink" in res.stderr.decode()


@pytest.mark.parametrize("planted", [".img.tar.gz.part", ".img.tar.gz.part.state", "img.tar.gz"])
@pytest.mark.timeout(2 * BOUND)
def test_a_fifo_at_a_receiver_name_is_refused_without_blocking(tmp_path, planted):
    os.mkfifo(tmp_path / planted)
    for argv in (probe_argv(tmp_path), receive_argv(tmp_path)):
        res = subprocess.run(argv, input=stdin_for(DATA), capture_output=True, timeout=BOUND)
        assert res.returncode == EXIT_REFUSED, res.stderr
        assert "FIFO" in one_error_line(res.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == [planted]


@pytest.mark.parametrize(
    "name", ["../escape.tar.gz", "sub/x.tar.gz", "..", ".hidden.tar.gz", "x\n.tar.gz", "x..tar.gz"]
)
def test_a_name_that_leaves_the_directory_is_refused(tmp_path, name):
    up = tmp_path / "up"
    up.mkdir()
    argv = receive_argv(up)
    argv[argv.index("img.tar.gz")] = name
    res = subprocess.run(argv, input=stdin_for(DATA), capture_output=True, timeout=BOUND)
    assert res.returncode == 5 and "NAME" in one_error_line(res.stderr)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["up"]


@settings(max_examples=40)
@given(
    state=st.one_of(
        st.binary(max_size=300),
        st.builds(
            lambda v: json.dumps(v).encode(),
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                lambda kids: (
                    st.lists(kids, max_size=3)
                    | st.dictionaries(
                        st.sampled_from(["sha256", "size", "chunk"]), kids, max_size=3
                    )
                ),
                max_leaves=6,
            ),
        ),
    )
)
@example(state=b"[]")
@example(state=b'{"sha256": 5, "size": "x", "chunk": 0}')
@example(state=b"\xff\xfe not json")
@example(state=b"[" * 5000)
def test_garbage_state_file_means_a_fresh_upload(tmp_path_factory, state):
    up = tmp_path_factory.mktemp("up")
    (up / ".img.tar.gz.part").write_bytes(b"old part bytes")
    (up / ".img.tar.gz.part.state").write_bytes(state)
    probe = subprocess.run(probe_argv(up), capture_output=True, timeout=BOUND)
    assert probe.returncode == 0, probe.stderr
    res = subprocess.run(
        receive_argv(up), input=stdin_for(DATA), capture_output=True, timeout=BOUND
    )
    assert res.returncode == 0, res.stderr
    assert (up / "img.tar.gz").read_bytes() == DATA
    assert sorted(p.name for p in up.iterdir()) == ["img.tar.gz"]
