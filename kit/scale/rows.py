"""A series' row at one node count, and the conventions the report's tables and figures share
(whether a series' epoch times compare with the paper's, the FLOP/s unit of a table), in a module
of their own so that the report, its figures and the container overhead read them without
importing each other."""

from __future__ import annotations

from dataclasses import dataclass

from kit.scale.paper import PAPER_EPOCH_EVENTS, PAPER_PRESET
from kit.scale.runs import RunResult, Series

# A results file may give a percentage of peak without naming the peak it is of.
UNNAMED_PEAK = "an unnamed peak"


@dataclass(frozen=True)
class Row:
    """One node count of a series: the median over its repeats, with their spread."""

    nodes: int
    seconds_per_epoch: float  # median wall time of a full epoch
    seconds_min: float
    seconds_max: float
    step_seconds: float | None  # median step-only estimate
    data_stall_percent: float | None  # median share of the wall epoch the steps leave unexplained
    linear_seconds: float
    efficiency_percent: float | None  # None for the base row (the paper's "-")
    showers_per_second: float
    flop_per_second: float
    percent_of_peak: float | None
    percent_of_peak_denominator: str | None
    percent_of_peak_fp64_max_clock: float | None
    runs: tuple[RunResult, ...]

    @property
    def repeats(self) -> int:
        return len(self.runs)

    @property
    def efficiency_range(self) -> tuple[float, float] | None:
        """Efficiency at this row's slowest and fastest repeat (the base row's median held)."""
        if self.efficiency_percent is None:
            return None
        return (
            100 * self.linear_seconds / self.seconds_max,
            100 * self.linear_seconds / self.seconds_min,
        )


def comparable_with_paper(key: Series) -> bool:
    """Absolute epoch times mean the same as the paper's only for its model and epoch size."""
    return key.preset == PAPER_PRESET and key.events_per_epoch == PAPER_EPOCH_EVENTS


def flop_unit(largest: float) -> tuple[str, float]:
    """GFLOP/s, TFLOP/s or PFLOP/s, whichever shows the largest value of a table as 1..999."""
    for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12)):
        if largest >= scale:
            return unit, scale
    return "GFLOP/s", 1e9
