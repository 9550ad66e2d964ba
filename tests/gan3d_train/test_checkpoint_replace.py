"""Saving a checkpoint over one of the same epoch (a resume from an older one): the old or the new
checkpoint is there at every instant, nothing the trainer did not write is replaced, and the
temporary trees of killed saves go with the next save. TensorFlow in-process, no MPI."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gan3d.checkpoint import META, CheckpointError, EpochCheckpoints, new_run_id
from kit.atomic import remove_tree_if
from tests.support.checkpoints import generator_state
from tests.support.training import train_env

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def state():
    return generator_state()


def test_resaving_an_epoch_replaces_it_whole(tmp_path, state):
    gen, ckpt = state
    ckpts = EpochCheckpoints(tmp_path / "ckpt", keep=3)
    ckpts.save(ckpt, gen, 2, meta={"preset": "tiny", "seed": 1})
    ckpts.save(ckpt, gen, 2, meta={"preset": "tiny", "seed": 7})
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
        EpochCheckpoints(tmp_path / "ckpt").save(ckpt, gen, 3, meta={"preset": "tiny"})
    assert (target / "notes.txt").read_text() == "keep me" and (
        mine / "notes.txt"
    ).read_text() == "keep me"


def test_a_checkpoint_swapped_for_a_users_tree_during_the_save_is_put_back_not_removed(
    tmp_path, state, monkeypatch
):
    """Between the check of epoch-NNNN (the trainer's meta.json) and the swap, another program puts a
    tree of its own there: the swap is undone, the user's tree stays whole at its name, one line."""
    import gan3d.checkpoint as module

    gen, ckpt = state
    ckpts = EpochCheckpoints(tmp_path / "ckpt", keep=3)
    final = ckpts.save(ckpt, gen, 2, meta={"preset": "tiny", "seed": 1})
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
        ckpts.save(ckpt, gen, 2, meta={"preset": "tiny", "seed": 7})
    assert (final / "data" / "keep.txt").read_text() == "mine\n"  # theirs, whole, at its name
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "epoch-0002"
    ]  # no temporary left


def test_leftovers_of_this_runs_gone_saves_are_removed_and_every_other_kept(tmp_path, state):
    """Only this run's temporary trees whose process is gone: another run's (on another node its
    process id means nothing here) and one without a run id are left alone."""
    gen, ckpt = state
    directory = tmp_path / "ckpt"
    directory.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    ckpts = EpochCheckpoints(directory)
    other = new_run_id()
    gone, running = (
        directory / f".epoch-0001.tmp-{dead.pid}.{ckpts.run_id}",
        directory / f".epoch-0001.tmp-{os.getppid()}.{ckpts.run_id}",
    )
    theirs, unnamed = (
        directory / f".epoch-0001.tmp-{dead.pid}.{other}",
        directory / f".epoch-0001.tmp-{dead.pid}",
    )
    for leftover in (gone, running, theirs, unnamed):
        (leftover / "sub").mkdir(parents=True)
    (gone / "sub").chmod(0o500)  # as an interrupted TensorFlow write may leave it
    ckpts.save(ckpt, gen, 1, meta={"preset": "tiny"})
    assert not gone.exists() and running.is_dir() and theirs.is_dir() and unnamed.is_dir()


def _checkpoint_of(directory: Path, epoch: int, run_id: str | None) -> Path:
    """A checkpoint as another run (or, without a run id, an earlier version of the trainer) left
    it.
    """
    path = directory / f"epoch-{epoch:04d}"
    path.mkdir(parents=True)
    for name in ("state.index", "state.data-00000-of-00001", "generator.weights.h5"):
        (path / name).write_bytes(b"theirs")
    meta = {"epoch": epoch, "preset": "tiny", **({"run_id": run_id} if run_id else {})}
    (path / META).write_text(json.dumps(meta))
    return path


def test_a_run_removes_and_names_only_its_own_checkpoints(tmp_path, state):
    """Another run's later epochs in the directory: each save keeps this run's newest `keep`, never
    deletes the epoch it just saved as "older", never touches theirs, and latest_own (what results
    name) is this run's."""
    gen, ckpt = state
    directory = tmp_path / "ckpt"
    theirs = [_checkpoint_of(directory, 5, new_run_id()), _checkpoint_of(directory, 6, None)]
    before = {p: sorted(q.read_bytes() for q in p.iterdir()) for p in theirs}
    ckpts = EpochCheckpoints(directory, keep=2)
    for epoch in (1, 2, 3):
        ckpts.save(ckpt, gen, epoch, meta={"preset": "tiny"})
        assert ckpts.latest_own() == directory / f"epoch-{epoch:04d}"
    assert sorted(p.name for p in directory.iterdir()) == [
        "epoch-0002",
        "epoch-0003",
        "epoch-0005",
        "epoch-0006",
    ]
    assert {p: sorted(q.read_bytes() for q in p.iterdir()) for p in theirs} == before
    assert (
        ckpts.latest() == directory / "epoch-0006"
        and ckpts.owner(directory / "epoch-0003") == ckpts.run_id
    )


def test_another_runs_checkpoint_of_the_same_epoch_is_refused_not_replaced(tmp_path, state):
    gen, ckpt = state
    theirs = _checkpoint_of(tmp_path / "ckpt", 2, new_run_id())
    with pytest.raises(
        CheckpointError,
        match="is another run's checkpoint .* --resume, or give a new --checkpoint-dir",
    ):
        EpochCheckpoints(tmp_path / "ckpt").save(ckpt, gen, 2, meta={"preset": "tiny"})
    assert (theirs / "state.index").read_bytes() == b"theirs"
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["epoch-0002"]


def test_a_resumed_run_goes_on_as_the_run_it_resumed(tmp_path, state):
    """It takes over the run id of the checkpoint it restored, so it prunes that run's older epochs
    (and only those), and names its own newest checkpoint."""
    gen, ckpt = state
    directory = tmp_path / "ckpt"
    first = EpochCheckpoints(directory, keep=2)
    for epoch in (1, 2):
        first.save(ckpt, gen, epoch, meta={"preset": "tiny"})
    again = EpochCheckpoints(directory, keep=2)
    assert again.run_id != first.run_id and again.latest_own() is None
    again.restore(ckpt, again.latest(), {"preset": "tiny"})
    assert again.run_id == first.run_id and again.latest_own() == directory / "epoch-0002"
    again.save(ckpt, gen, 3, meta={"preset": "tiny"})
    assert sorted(p.name for p in directory.iterdir()) == ["epoch-0002", "epoch-0003"]


def test_a_checkpoint_swapped_before_its_removal_is_put_back(tmp_path):
    """The removal of an old checkpoint moves it aside and checks the inode it checked: a tree put
    at its name meanwhile goes back to that name, whole."""
    old = tmp_path / "epoch-0001"
    old.mkdir()
    checked = os.lstat(old).st_ino
    old.rename(tmp_path / "moved")
    (old / "data").mkdir(parents=True)
    (old / "data" / "keep.txt").write_text("mine\n")
    assert remove_tree_if(old, ".epoch-0001.tmp-1.x", checked) is False
    assert (old / "data" / "keep.txt").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0001", "moved"]
    assert remove_tree_if(tmp_path / "moved", ".aside", checked) is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0001"]


def test_a_tree_with_the_checked_inode_that_is_no_longer_owned_is_put_back(tmp_path):
    """An inode number is reused by a tree made since the check: ownership is asked again of the tree
    moved aside, and another's goes back to its name, whole."""
    old = tmp_path / "epoch-0001"
    (old / "data").mkdir(parents=True)
    (old / "meta.json").write_text('{"run_id": "another"}')
    checked = os.lstat(old).st_ino  # the same inode: as if reused
    seen = []

    def ours(tree):
        seen.append(tree.name)
        return json.loads((tree / "meta.json").read_text())["run_id"] == "mine"

    assert remove_tree_if(old, ".epoch-0001.tmp-1.x", checked, owned=ours) is False
    assert seen == [".epoch-0001.tmp-1.x"]  # asked of the tree as moved aside, not by its old name
    assert (
        json.loads((old / "meta.json").read_text())["run_id"] == "another"
        and (old / "data").is_dir()
    )
    assert sorted(x.name for x in tmp_path.iterdir()) == ["epoch-0001"]


@pytest.mark.timeout(300)
def test_a_checkpoint_is_there_at_every_instant_and_a_kill_leaves_a_whole_one(tmp_path):
    """A child re-saves epoch 2 again and again; the parent looks without pause, then SIGKILLs
    it.
    """
    directory = tmp_path / "ckpt"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from tests.support.checkpoints import generator_state
        from gan3d.checkpoint import EpochCheckpoints
        gen, ckpt = generator_state()
        ckpts = EpochCheckpoints({str(directory)!r}, keep=2)
        seed = 0
        while True:
            ckpts.save(ckpt, gen, 2, meta={{"preset": "tiny", "seed": seed}})
            seed += 1
            print(seed, ckpts.run_id, flush=True)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=train_env(),  # TMPDIR: the run's own, where the killed child's AutoGraph files go
    )
    try:
        first, run_id = child.stdout.readline().split()
        assert first == "1", "the child saved once"
        final = directory / "epoch-0002"
        looks, deadline = 0, time.monotonic() + 8
        while time.monotonic() < deadline:
            assert (final / META).is_file() and (final / "state.index").is_file(), (
                "no whole checkpoint"
            )
            looks += 1
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        child.kill()
    assert looks > 1000
    assert (final / META).is_file() and (final / "state.index").is_file()
    gen, ckpt = generator_state()
    # the run going on (a resume takes over its id) cleans the killed save's tree
    EpochCheckpoints(directory, run_id=run_id).save(ckpt, gen, 1, meta={"preset": "tiny"})
    assert sorted(p.name for p in directory.iterdir()) == ["epoch-0001", "epoch-0002"]
