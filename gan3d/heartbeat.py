"""Rank 0's progress line during an epoch, every N steps or T seconds, whichever comes first.

On a real site an epoch can take 15 minutes; with one line per epoch a hung job looks like a
slow one. A heartbeat names the epoch, the steps done of the epoch's total, the showers/s of the
epoch so far (job-level) and the epoch's ETA at that rate. A step that hangs prints nothing more,
so the log's last heartbeat says when progress stopped.
"""

from __future__ import annotations

import time
from typing import Callable


class Heartbeat:
    """Decides when to beat and words the line; `clock` is injectable so the rule can be tested."""

    def __init__(
        self,
        say: Callable[[str], None],
        *,
        epochs: int,
        steps: int,
        showers_per_step: int,
        every_steps: int | None,
        every_seconds: float | None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.say, self.epochs, self.steps, self.showers_per_step = (
            say,
            epochs,
            steps,
            showers_per_step,
        )
        self.every_steps, self.every_seconds, self.clock = every_steps, every_seconds, clock
        self.epoch, self.started, self.last_beat, self.last_steps = 0, 0.0, 0.0, 0

    def start_epoch(self, epoch: int) -> None:
        """`epoch` counts from 1; call when the epoch's first batch is asked for."""
        self.epoch = epoch
        self.started = self.last_beat = self.clock()
        self.last_steps = 0

    def step_done(self, done: int) -> bool:
        """After the epoch's `done`-th step: print a line if N steps or T seconds passed since the
        last.
        """
        now = self.clock()
        due = (self.every_steps is not None and done - self.last_steps >= self.every_steps) or (
            self.every_seconds is not None and now - self.last_beat >= self.every_seconds
        )
        if not due:
            return False
        self.last_beat, self.last_steps = now, done
        self.say(self.line(done, now - self.started))
        return True

    def line(self, done: int, elapsed: float) -> str:
        rate = done * self.showers_per_step / elapsed if elapsed > 0 else float("nan")
        eta = (self.steps - done) * elapsed / done if done else float("nan")
        return (
            f"gan3d train: heartbeat: epoch {self.epoch}/{self.epochs}, step {done}/{self.steps}, "
            f"{rate:.2f} showers/s so far, epoch ETA {eta:.0f} s"
        )
