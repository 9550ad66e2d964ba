"""Per-epoch training checkpoints, written so that a crash never leaves a half checkpoint behind.

Layout: DIR/epoch-NNNN/{state.index, state.data-*, generator.weights.h5, meta.json}. Each is
written into a hidden temporary sibling and renamed into place when complete (meta.json last);
only the newest `keep` are kept. `latest` only ever returns a complete one.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from kit.atomic import atomic_write_text

_NAME = re.compile(r"^epoch-(\d{4,})\Z")
STATE = "state"
GENERATOR_WEIGHTS = "generator.weights.h5"
META = "meta.json"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used to resume; the message names it and the fix."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EpochCheckpoints:
    """Save/find/restore the state after each epoch in one directory."""

    def __init__(self, directory: str | os.PathLike, keep: int = 2):
        if keep < 1:
            raise CheckpointError(f"--keep-checkpoints {keep}: must keep at least 1")
        self.directory = Path(directory)
        self.keep = keep

    def complete(self) -> list[tuple[int, Path]]:
        """(epoch, path) of every complete checkpoint, oldest first."""
        found = []
        if self.directory.is_dir():
            for entry in self.directory.iterdir():
                match = _NAME.match(entry.name)
                if match and (entry / META).is_file():
                    found.append((int(match.group(1)), entry))
        return sorted(found)

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1][1] if done else None

    def save(self, checkpoint, generator, epoch: int, meta: dict) -> Path:
        """Write `checkpoint` (a tf.train.Checkpoint) and the generator's weights for epoch `epoch`."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"epoch-{epoch:04d}"
        tmp = self.directory / f".epoch-{epoch:04d}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            checkpoint.write(str(tmp / STATE))
            generator.save_weights(str(tmp / GENERATOR_WEIGHTS))
            atomic_write_text(tmp / META, json.dumps({"epoch": epoch, **meta}, indent=2) + "\n")
            _fsync_dir(tmp)
            if final.exists():  # re-running an epoch (e.g. after a resume from an older one)
                shutil.rmtree(final)
            os.replace(tmp, final)
            _fsync_dir(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for _, old in self.complete()[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    @staticmethod
    def read_meta(path: Path) -> dict:
        try:
            return json.loads((path / META).read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{path / META}: unreadable checkpoint metadata ({exc}); "
                                  f"fix: delete {path} to resume from the one before it") from exc

    def restore(self, checkpoint, path: Path, expect: dict) -> dict:
        """Load `path` into `checkpoint`; `expect` holds meta keys that must match (e.g. the preset)."""
        meta = self.read_meta(path)
        for key, value in expect.items():
            if meta.get(key) != value:
                raise CheckpointError(
                    f"{path}: checkpoint has {key}={meta.get(key)!r} but this run asks for {value!r}; "
                    f"fix: resume with the same {key}, or use another --checkpoint-dir")
        try:
            checkpoint.read(str(path / STATE)).assert_existing_objects_matched()
        except (AssertionError, ValueError) as exc:
            raise CheckpointError(f"{path / STATE}: does not match this model ({exc}); "
                                  f"fix: use another --checkpoint-dir or train without --resume") from exc
        return meta
