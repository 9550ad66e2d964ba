"""Container vs bare: the same layout run both ways, per
node count, as the paper's section 5.4 asks.

Overhead in % = 100 x (T_container - T_bare) / T_bare of the median wall epochs; its range pairs the
extremes of the repeats (fastest container vs slowest bare .. slowest container vs fastest bare), so
it is as wide as the runs' own spread. Memory both ways: the largest rank's peak RSS and the lowest
MemAvailable a node had at an epoch's end (medians over the repeats).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING

from kit.scale.runs import Series

if TYPE_CHECKING:
    from kit.scale.rows import Row


@dataclass(frozen=True)
class Overhead:
    """One layout at one node count, measured in the container and bare."""

    layout: Series  # the shared key: container and image digest cleared
    container: Series
    nodes: int
    inside: Row
    bare: Row

    @property
    def percent(self) -> float:
        return (
            100
            * (self.inside.seconds_per_epoch - self.bare.seconds_per_epoch)
            / self.bare.seconds_per_epoch
        )

    @property
    def percent_range(self) -> tuple[float, float]:
        return (
            100 * (self.inside.seconds_min - self.bare.seconds_max) / self.bare.seconds_max,
            100 * (self.inside.seconds_max - self.bare.seconds_min) / self.bare.seconds_min,
        )

    def peak_rss_bytes(self) -> tuple[float | None, float | None]:
        """(container, bare) medians of the largest rank's peak RSS."""
        return _memory(self.inside, "peak_rss_bytes"), _memory(self.bare, "peak_rss_bytes")

    def memory_available_bytes(self) -> tuple[float | None, float | None]:
        """(container, bare) medians of the lowest MemAvailable at an epoch's end."""
        return _memory(self.inside, "memory_available_bytes"), _memory(
            self.bare, "memory_available_bytes"
        )


def _memory(row: Row, field: str) -> float | None:
    values = [getattr(r, field) for r in row.runs if getattr(r, field) is not None]
    return median(values) if values else None


def container_overhead(series: Mapping[Series, Sequence[Row]]) -> list[Overhead]:
    """Every (container series, bare series) pair whose keys differ only in the container, at each
    node count both have; runs of different images are compared with the bare runs one by one."""
    bare = {key: rows for key, rows in series.items() if key.container is None}
    out = []
    for key, rows in series.items():
        match = bare.get(key.layout) if key.container is not None else None
        if match is None:
            continue
        by_nodes = {row.nodes: row for row in match}
        out += [
            Overhead(
                layout=key.layout,
                container=key,
                nodes=row.nodes,
                inside=row,
                bare=by_nodes[row.nodes],
            )
            for row in rows
            if row.nodes in by_nodes
        ]
    return out
