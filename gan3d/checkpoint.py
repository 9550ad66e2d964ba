"""Per-epoch training checkpoints, written so that a crash never leaves a half checkpoint behind.

Layout: DIR/epoch-NNNN/{state.index, state.data-*, generator.weights.h5, meta.json}. Each is
written into a hidden temporary sibling and renamed into place when complete (meta.json last);
only the newest `keep` are kept. `latest` only ever returns a complete one.

Each checkpoint's meta.json records the run id of the run that wrote it (a resumed run carries on
the id of the checkpoint it resumed from). A run replaces or removes only checkpoints, and
temporary trees, that carry its own id: another run's (or one without an id) is never deleted,
and a fresh run into a directory that holds checkpoints is refused before it starts
(`refuse_others`), so its results can never name another run's checkpoint.

Reading one back trusts nothing in it: meta.json must be a small regular file holding a JSON
object whose `epoch` is the int in the directory's name, and every entry of the directory must be
a regular file (TensorFlow and h5py would block on a FIFO) before TensorFlow reads the state;
any defect is a CheckpointError of one line naming the file, the field and the fix.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import uuid
from pathlib import Path

from gan3d.files import NotRegularFile, read_regular
from kit.atomic import atomic_write_text, fsync_path, remove_tree, remove_tree_if, replace_tree
from kit.errors import KitError
from kit.excerpt import one_line, shown
from kit.schema import Bad, Field, Section, check_value

_NAME = re.compile(r"epoch-(\d{4,9})")
MAX_EPOCH = 999_999_999  # the most a directory name holds
# .epoch-NNNN.tmp-PID.RUNID: a save (or a removal) in progress, or killed, by process PID
TMP_TAG = ".tmp-"
_TMP = re.compile(r"\.epoch-\d{4,9}\.tmp-(\d{1,10})\.([0-9a-f]{32})")
RUN_ID = re.compile(r"[0-9a-f]{32}")
MAX_META_BYTES = 64 * 1024
MAX_ENTRIES = 64  # files in one checkpoint directory (the kit writes four)
MAX_SCAN = 100_000  # entries of --checkpoint-dir looked at for another run's checkpoints
# Numbers a meta.json may hold (it may have been edited since the trainer wrote it): each bounded
# when it is read, as gan3d train bounds its options.
META_BOUNDS = {
    "seed": (0, 2**32 - 1),
    "ranks": (1, 1 << 24),
    "batch_size": (1, 1 << 24),
    "steps_per_epoch": (1, 1 << 40),
}


def _run_id(value: str) -> Bad | None:
    return None if RUN_ID.fullmatch(value) else Bad(f"{shown(value)} is not 32 hex digits")


# meta.json as gan3d train writes it (EpochCheckpoints.save: the epoch, the run's settings, its id)
META_SCHEMA = Section(
    {
        "epoch": Field("int", minimum=1, maximum=MAX_EPOCH),
        "preset": Field("str", required=False),
        "precision": Field("str", required=False),
        "run_id": Field("str", required=False, check=_run_id),
        **{
            k: Field("int", required=False, minimum=lo, maximum=hi)
            for k, (lo, hi) in META_BOUNDS.items()
        },
    },
    open=True,
)


def new_run_id() -> str:
    """A run's identity in its checkpoints: 128 random bits, so no other run has it by chance."""
    return uuid.uuid4().hex


STATE = "state"
GENERATOR_WEIGHTS = "generator.weights.h5"
META = "meta.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class CheckpointError(KitError, ValueError):
    """A checkpoint that cannot be used to resume, with where it is and the fix (a ValueError
    too: gan3d's own checks are)."""


class EpochCheckpoints:
    """Save/find/restore the state after each epoch in one directory."""

    def __init__(self, directory: str | os.PathLike, keep: int = 2, run_id: str | None = None):
        if keep < 1:
            raise CheckpointError(
                f"--keep-checkpoints {keep}: must keep at least 1", fix="give 1 or more"
            )
        self.directory = Path(directory)
        self.keep = keep
        self.run_id = run_id or new_run_id()  # a resume takes over the id of what it restored
        self.restored: Path | None = None

    def complete(self) -> list[tuple[int, Path]]:
        """(epoch, path) of every complete checkpoint, oldest first."""
        found = []
        if self.directory.is_dir():
            for entry in os.scandir(self.directory):
                match = _NAME.fullmatch(entry.name)
                if (
                    match
                    and entry.is_dir(follow_symlinks=False)
                    and os.path.lexists(Path(entry.path, META))
                ):
                    found.append((int(match.group(1)), Path(entry.path)))
        return sorted(found)

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1][1] if done else None

    def owner(self, path: Path) -> str | None:
        """The run id in checkpoint `path`'s meta.json (None: none, or unreadable)."""
        try:
            return self.read_meta(path).get("run_id")
        except CheckpointError:
            return None

    def own(self) -> list[tuple[int, Path]]:
        """(epoch, path) of every complete checkpoint this run wrote, oldest first."""
        return [(epoch, path) for epoch, path in self.complete() if self.owner(path) == self.run_id]

    def latest_own(self) -> Path | None:
        """This run's newest complete checkpoint, else the one it resumed from: what its results
        name (never another run's)."""
        mine = self.own()
        return mine[-1][1] if mine else self.restored

    def refuse_others(self) -> None:
        """A run without --resume: refused (CheckpointError) if the directory already holds a
        checkpoint, complete or not, or a save in progress: its epochs would mix with, or replace,
        another run's."""
        if not self.directory.is_dir():
            return
        found = []
        with os.scandir(self.directory) as listing:
            for entry in itertools.islice(listing, MAX_SCAN):
                match = _TMP.fullmatch(entry.name)
                if _NAME.fullmatch(entry.name) or (match and _alive(int(match.group(1)))):
                    found.append(entry.name)
        if found:
            shown = ", ".join(sorted(found)[:3]) + (", ..." if len(found) > 3 else "")
            raise CheckpointError(
                f"holds another run's checkpoints ({shown})",
                fix="continue that run with --resume, or give a new --checkpoint-dir",
                where=f"--checkpoint-dir {self.directory}",
            )

    def prepare(self) -> None:
        """Create the directory: the trainer calls this before training, so that a --checkpoint-dir
        that cannot hold checkpoints fails in seconds, not after the first epoch."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(
                f"cannot be created as a directory ({exc.strerror})",
                fix="give a directory path that can be written",
                where=f"--checkpoint-dir {self.directory}",
            ) from None

    def save(self, checkpoint, generator, epoch: int, *, meta: dict) -> Path:
        """Write `checkpoint` (a tf.train.Checkpoint) and the generator's weights for epoch `epoch`.

        Built in a temporary sibling and put in place in one step (an existing checkpoint of the
        same epoch written by this run, after a resume from an older one, is exchanged, then
        removed; another run's is refused): a run killed at any instant leaves the old or the new
        checkpoint of that epoch, and the next save removes this run's temporary trees whose
        process is gone."""
        self.prepare()
        self._remove_leftovers()
        final = self.directory / f"epoch-{epoch:04d}"
        if os.path.lexists(final) and not (Path(final, META).is_file() and not final.is_symlink()):
            raise CheckpointError(
                f"is in the way of epoch {epoch}'s checkpoint and is not one the trainer wrote "
                "(no meta.json)",
                fix="move it out of --checkpoint-dir",
                where=str(final),
            )
        recognised = os.lstat(final).st_ino if os.path.lexists(final) else None
        if recognised is not None and self.owner(final) != self.run_id:
            raise CheckpointError(
                "is another run's checkpoint (its meta.json has another run id); "
                "nothing was replaced",
                fix="continue that run with --resume, or give a new --checkpoint-dir",
                where=str(final),
            )
        tmp = self.directory / self._tmp_name(epoch)
        remove_tree(tmp)
        tmp.mkdir()
        try:
            checkpoint.write(str(tmp / STATE))
            generator.save_weights(str(tmp / GENERATOR_WEIGHTS))
            atomic_write_text(
                tmp / META,
                json.dumps({"epoch": epoch, **meta, "run_id": self.run_id}, indent=2) + "\n",
            )
            fsync_path(tmp)
            replace_tree(tmp, final, recognised)
        except FileExistsError:
            remove_tree(tmp)
            raise CheckpointError(
                f"appeared or changed while epoch {epoch}'s checkpoint was saved; "
                "nothing was replaced",
                fix="keep other programs out of --checkpoint-dir",
                where=str(final),
            ) from None
        except BaseException:
            remove_tree(tmp)
            raise
        self._prune()
        return final

    def _tmp_name(self, epoch: int) -> str:
        return f".epoch-{epoch:04d}{TMP_TAG}{os.getpid()}.{self.run_id}"

    def _prune(self) -> None:
        """Remove this run's checkpoints older than the newest `keep` of them; each is checked (its
        run id, then its inode as it is moved aside), so a tree put in its place meanwhile stays."""
        for epoch, old in self.own()[: -self.keep]:
            try:
                ino = os.lstat(old).st_ino
            except FileNotFoundError:
                continue
            if self.owner(old) == self.run_id:
                remove_tree_if(
                    old,
                    self._tmp_name(epoch),
                    ino,
                    owned=lambda tree: self.owner(tree) == self.run_id,
                )

    def _remove_leftovers(self) -> None:
        """Temporary trees of this run's saves whose process is gone (killed mid-save); another
        run's are left alone (a run on another node has a process id this host cannot see)."""
        for entry in os.scandir(self.directory):
            match = _TMP.fullmatch(entry.name)
            if match and match.group(2) == self.run_id and not _alive(int(match.group(1))):
                remove_tree(entry.path)

    @staticmethod
    def read_meta(path: Path) -> dict:
        """meta.json of checkpoint `path`, checked: a JSON object with an int `epoch` matching the
        name.
        """
        file, fix = path / META, f"delete {path} to resume from the one before it"
        try:
            meta = json.loads(read_regular(file, MAX_META_BYTES, follow_symlinks=False))
        except NotRegularFile as exc:
            raise CheckpointError(
                f"is {exc.kind}, not a regular file", fix=fix, where=str(file)
            ) from None
        except (
            OSError,
            ValueError,
            RecursionError,
        ) as exc:  # unreadable, too big, not JSON, too deep
            raise CheckpointError(
                f"unreadable checkpoint metadata ({one_line(exc)})", fix=fix, where=str(file)
            ) from None
        check_value(
            meta, file, META_SCHEMA, what="checkpoint metadata", fix=fix, error=CheckpointError
        )
        match = _NAME.fullmatch(path.name)
        if match and int(match.group(1)) != meta["epoch"]:
            raise CheckpointError(
                f"epoch: {meta['epoch']} but the directory is {path.name}",
                fix=fix,
                where=str(file),
            )
        return meta

    @staticmethod
    def check_files(path: Path) -> None:
        """Every entry of checkpoint `path` is a regular file, and the state index and data
        exist.
        """
        fix = f"delete {path} to resume from the one before it"
        try:
            with os.scandir(path) as listing:
                entries = list(itertools.islice(listing, MAX_ENTRIES + 1))
        except OSError as exc:
            raise CheckpointError(
                f"cannot list the checkpoint ({exc.strerror})", fix=fix, where=str(path)
            ) from None
        if len(entries) > MAX_ENTRIES:
            raise CheckpointError(
                f"holds more than {MAX_ENTRIES} entries, not a checkpoint",
                fix=fix,
                where=str(path),
            )
        for entry in entries:
            if not entry.is_file(follow_symlinks=False):
                kind = (
                    "a directory" if entry.is_dir(follow_symlinks=False) else "not a regular file"
                )
                if entry.is_symlink():
                    kind = "a symbolic link"
                raise CheckpointError(
                    f"is {kind}; a checkpoint holds regular files only", fix=fix, where=entry.path
                )
        names = {e.name for e in entries}
        for need in (f"{STATE}.index", GENERATOR_WEIGHTS):
            if need not in names:
                raise CheckpointError(
                    "missing, the checkpoint is incomplete", fix=fix, where=str(path / need)
                )
        if not any(n.startswith(f"{STATE}.data-") for n in names):
            raise CheckpointError(
                "missing, the checkpoint is incomplete", fix=fix, where=f"{path / STATE}.data-*"
            )

    def restore(self, checkpoint, path: Path, expect: dict) -> dict:
        """Load `path` into `checkpoint`; `expect` holds meta keys that must match (e.g. the
        preset).
        """
        import tensorflow as tf

        meta = self.read_meta(path)
        for key, value in expect.items():
            if meta.get(key) != value:
                raise CheckpointError(
                    f"checkpoint has {key}={meta.get(key)!r} but this run asks for {value!r}",
                    fix=f"resume with the same {key}, or use another --checkpoint-dir",
                    where=str(path),
                )
        self.check_files(path)
        try:
            checkpoint.read(str(path / STATE)).assert_existing_objects_matched()
        except (AssertionError, ValueError) as exc:
            raise CheckpointError(
                f"does not match this model ({one_line(exc)})",
                fix="use another --checkpoint-dir or train without --resume",
                where=str(path / STATE),
            ) from None
        except (tf.errors.OpError, IndexError) as exc:  # missing or truncated state files
            raise CheckpointError(
                f"cannot be read ({type(exc).__name__}: {one_line(exc)})",
                fix=f"delete {path} to resume from the one before it",
                where=str(path / STATE),
            ) from None
        if meta.get("run_id"):
            self.run_id = meta["run_id"]  # the resumed run goes on as the run that wrote it
        self.restored = path
        return meta
