"""Progress from the library's long work: running totals for a caller's `progress(done, total)`.

The library counts blocks of bytes as they pass; the CLI draws the bar (kit/commands/progress.py).
"""

from __future__ import annotations

from typing import Callable


def counter(
    total: int, progress: Callable[[int, int], None] | None
) -> Callable[[int], None] | None:
    """A `tick(n)` that adds n bytes and reports progress(done, total); None without
    ``progress``.
    """
    if progress is None:
        return None
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        progress(done, total)

    return tick
