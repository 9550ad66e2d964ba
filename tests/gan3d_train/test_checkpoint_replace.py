"""Saving a checkpoint over one of the same epoch (a resume from an older one): the old or the new
checkpoint is there at every instant, nothing the trainer did not write is replaced, and the
temporary trees of killed saves go with the next save. TensorFlow in-process, no MPI."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gan3d.checkpoint import META, CheckpointError, EpochCheckpoints

REPO = Path(__file__).resolve().parents[2]


def _state():
    import tensorflow as tf

    from gan3d.model import generator

    gen = generator("tiny")
    return gen, tf.train.Checkpoint(generator=gen, epoch=tf.Variable(0))


@pytest.fixture(scope="module")
def state():
    return _state()


def test_resaving_an_epoch_replaces_it_whole(tmp_path, state):
    gen, ckpt = state
    ckpts = EpochCheckpoints(tmp_path / "ckpt", keep=3)
    ckpts.save(ckpt, gen, 2, {"preset": "tiny", "seed": 1})
    ckpts.save(ckpt, gen, 2, {"preset": "tiny", "seed": 7})
    assert EpochCheckpoints.read_meta(tmp_path / "ckpt" / "epoch-0002")["seed"] == 7
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["epoch-0002"]


@pytest.mark.parametrize("planted", ["directory", "symlink"])
def test_what_the_trainer_did_not_write_is_refused_and_left(tmp_path, state, planted):
    gen, ckpt = state
    (tmp_path / "ckpt").mkdir()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    target = tmp_path / "ckpt" / "epoch-0003"
    if planted == "symlink":
        target.symlink_to(mine)
    else:
        target.mkdir()
        (target / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="not one the trainer wrote"):
        EpochCheckpoints(tmp_path / "ckpt").save(ckpt, gen, 3, {"preset": "tiny"})
    assert (target / "notes.txt").read_text() == "keep me" and (mine / "notes.txt").read_text() == "keep me"


def test_a_checkpoint_swapped_for_a_users_tree_during_the_save_is_put_back_not_removed(tmp_path, state,
                                                                                       monkeypatch):
    """Between the check of epoch-NNNN (the trainer's meta.json) and the swap, another program puts a
    tree of its own there: the swap is undone, the user's tree stays whole at its name, one line."""
    import gan3d.checkpoint as module

    gen, ckpt = state
    ckpts = EpochCheckpoints(tmp_path / "ckpt", keep=3)
    final = ckpts.save(ckpt, gen, 2, {"preset": "tiny", "seed": 1})
    theirs = tmp_path / "theirs"
    (theirs / "data").mkdir(parents=True)
    (theirs / META).write_text("not the trainer's\n")
    (theirs / "data" / "keep.txt").write_text("mine\n")
    real_fsync = module.fsync_path

    def swap_then_fsync(path):  # runs right before the replacement
        real_fsync(path)
        os.rename(final, tmp_path / "ours-moved")
        os.rename(theirs, final)
    monkeypatch.setattr(module, "fsync_path", swap_then_fsync)
    with pytest.raises(CheckpointError, match="changed while epoch 2's checkpoint was saved"):
        ckpts.save(ckpt, gen, 2, {"preset": "tiny", "seed": 7})
    assert (final / "data" / "keep.txt").read_text() == "mine\n"  # theirs, whole, at its name
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["epoch-0002"]  # no temporary left


def test_leftovers_of_gone_saves_are_removed_and_live_ones_kept(tmp_path, state):
    gen, ckpt = state
    directory = tmp_path / "ckpt"
    directory.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone, running = directory / f".epoch-0001.tmp-{dead.pid}", directory / f".epoch-0001.tmp-{os.getppid()}"
    for leftover in (gone, running):
        (leftover / "sub").mkdir(parents=True)
    (gone / "sub").chmod(0o500)  # as an interrupted TensorFlow write may leave it
    EpochCheckpoints(directory).save(ckpt, gen, 1, {"preset": "tiny"})
    assert not gone.exists() and running.is_dir()


@pytest.mark.timeout(300)
def test_a_checkpoint_is_there_at_every_instant_and_a_kill_leaves_a_whole_one(tmp_path):
    """A child re-saves epoch 2 again and again; the parent looks without pause, then SIGKILLs it."""
    directory = tmp_path / "ckpt"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from tests.gan3d_train.test_checkpoint_replace import _state
        from gan3d.checkpoint import EpochCheckpoints
        gen, ckpt = _state()
        ckpts = EpochCheckpoints({str(directory)!r}, keep=2)
        seed = 0
        while True:
            ckpts.save(ckpt, gen, 2, {{"preset": "tiny", "seed": seed}})
            seed += 1
            print(seed, flush=True)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "1", "the child saved once"
        final = directory / "epoch-0002"
        looks, deadline = 0, time.monotonic() + 8
        while time.monotonic() < deadline:
            assert (final / META).is_file() and (final / "state.index").is_file(), "no whole checkpoint"
            looks += 1
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        child.kill()
    assert looks > 1000
    assert (final / META).is_file() and (final / "state.index").is_file()
    gen, ckpt = _state()
    EpochCheckpoints(directory).save(ckpt, gen, 1, {"preset": "tiny"})  # cleans the killed save's tree
    assert sorted(p.name for p in directory.iterdir()) == ["epoch-0001", "epoch-0002"]
