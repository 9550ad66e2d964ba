"""Every training step's wall time, kept compactly and summarised in a record of bounded size.

A run's throughput excludes its first step (it traces the tf.function), so that one is kept
apart as `first`; the summary covers every step, the first included, so that its count is the
number of steps run and a slow first step shows among the slowest. Percentiles use the nearest
rank (each is one of the recorded times). Memory: 8 bytes per step (a million steps: 8 MB).
"""

from __future__ import annotations

import heapq
import math
from array import array

SLOWEST = 10  # slowest steps named in the record, whatever the run length
PERCENTILES = (50, 90, 99)


class StepTimes:
    """Step wall times of this rank, with where each slow one happened (epoch and step, from 1)."""

    def __init__(self, slowest: int = SLOWEST):
        self.first: float | None = None
        self.steps = 0  # timed steps: the first one excluded
        self.seconds = 0.0
        # the first included: an epoch's share is compared with its wall clock
        self.every_step = 0.0
        self._all = array("d")
        self._slowest: list[tuple[float, int, int]] = []  # a min-heap of (seconds, epoch, step)
        self._keep = slowest

    def add(self, seconds: float, epoch: int, step: int) -> None:
        self.every_step += seconds
        self._all.append(seconds)
        entry = (seconds, epoch, step)
        if len(self._slowest) < self._keep:
            heapq.heappush(self._slowest, entry)
        elif entry > self._slowest[0]:
            heapq.heapreplace(self._slowest, entry)
        if self.first is None:
            self.first = seconds
        else:
            self.steps, self.seconds = self.steps + 1, self.seconds + seconds

    def summary(self) -> dict:
        """count, mean, min, p50/p90/p99, max (seconds) and the slowest steps, slowest first."""
        n = len(self._all)
        ordered = sorted(self._all)
        out: dict = {
            "count": n,
            "includes_first_step": True,
            "mean_seconds": math.fsum(ordered) / n if n else None,
            "min_seconds": ordered[0] if n else None,
        }
        for p in PERCENTILES:
            out[f"p{p}_seconds"] = nearest_rank(ordered, p)
        out["max_seconds"] = ordered[-1] if n else None
        out["slowest"] = [
            {"epoch": e, "step": s, "seconds": t} for t, e, s in sorted(self._slowest, reverse=True)
        ]
        return out


def nearest_rank(ordered: list[float], percent: int) -> float | None:
    """The smallest recorded value with at least `percent`% of the values at or below it
    (integer arithmetic: in floats 7 / 100 x 100 is 7.000000000000001 and would pick the 8th)."""
    if not ordered:
        return None
    return ordered[max(0, -(-percent * len(ordered) // 100) - 1)]
