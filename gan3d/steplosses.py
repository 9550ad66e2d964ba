"""Rank 0's D and G losses at logged steps, for the
per-step loss curve, in a record of bounded size.

The epoch's losses in `losses` are means over all steps and ranks; these are single steps of
rank 0's own batch (noisier, not averaged over ranks), which show what happens inside an epoch.
A long run keeps at most MAX_POINTS: when full, the stride doubles and every other point goes,
so the points are always the steps whose global index is a multiple of the stride.
"""

from __future__ import annotations

NAMES = ("d_loss", "g_loss")
MAX_POINTS = 1024


class StepLosses:
    def __init__(self, max_points: int = MAX_POINTS):
        self.stride = 1
        # (global step, epoch, step, d, g)
        self.points: list[tuple[int, int, int, float, float]] = []
        self._max = max(2, max_points)

    def add(self, global_step: int, epoch: int, step: int, *, losses: dict[str, float]) -> None:
        """`global_step` counts from 0 over the whole run (resumed runs continue the count)."""
        if global_step % self.stride or not all(n in losses for n in NAMES):
            return
        d_loss, g_loss = (float(losses[n]) for n in NAMES)
        self.points.append((global_step, epoch, step, d_loss, g_loss))
        if len(self.points) > self._max:
            self.stride *= 2
            self.points = [p for p in self.points if p[0] % self.stride == 0]

    def record(self) -> dict:
        return {
            "source": "rank 0, its own batch, not averaged over ranks",
            "stride": self.stride,
            "columns": ["global_step", "epoch", "step", *NAMES],
            "points": [list(p) for p in self.points],
        }
