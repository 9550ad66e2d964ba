"""Progress bars for long byte-moving commands: rich on a terminal, nothing in logs and pipes."""

from __future__ import annotations

import sys
from contextlib import ExitStack

from kit.excerpt import printable
from kit.verbosity import quiet


class ByteBar:
    """One rich bar counting bytes (size, speed, time left)."""

    def __init__(self, stack: ExitStack, label: str, total: int | None = None):
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self.bar = stack.enter_context(
            Progress(
                TextColumn("{task.description}", markup=False),  # a file's name, as text
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                transient=True,
            )
        )
        self.task = self.bar.add_task(printable(label, 80), total=total)

    def advance(self, n: int) -> None:
        self.bar.advance(self.task, n)

    def update(self, done: int, total: int) -> None:
        self.bar.update(self.task, completed=done, total=total)


def byte_bar(stack: ExitStack, label: str, total: int | None = None) -> ByteBar | None:
    """A bar when stderr is a terminal and -q was not given, else None (callers pass
    `bar.update if bar else None`)."""
    return ByteBar(stack, label, total) if sys.stderr.isatty() and not quiet() else None
