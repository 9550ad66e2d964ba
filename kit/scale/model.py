"""The scaling model behind `kit scale predict`, fitted on
measured epoch times only (docs/predict.md).

An epoch is a fixed number of showers split over P = N x ranks-per-node ranks, with a fixed batch
per rank, so the compute of an epoch is the same at every node count and the node-seconds per
epoch, u(N) = N x T(N), grow only by overhead. Each shape below is one way that overhead can grow
with the ranks, all zero for one rank:

    u(N) = a + b (f(P) - f(P0))                   a, b >= 0 by least squares on the medians
    u(N) = a + c (N - N0)                         3 or more node counts: a fixed c seconds per epoch
    u(N) = a + b (f(P) - f(P0)) + c (N - N0)      4 or more node counts: both

with N0 the smallest measured count (P0 its ranks), so a is the node-seconds there. The per-epoch
cost alone is Amdahl's serial part: the epoch time stops falling at c, as where every epoch pays a
fixed start or a resource all nodes share (one file system; cores the nodes time-share).

The shape with the smallest residual (its standard error, so that a third parameter must earn its
place) is the estimate; every shape whose residual is within reach of the best spans the band,
which is widened by a base margin, by half the repeats' spread and by a margin per doubling beyond
the largest measured count. The per-epoch term (alone or with a shape) enters only where it halves
the best residual of the shapes without it: it grows linearly in N, and a term the runs do not
need would widen the band
far beyond them. Nothing here reads a network figure: the overhead is measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from kit.errors import KitError

# f(P) over an array of rank counts, or one count (the smallest, P0).
Counts = Union[np.ndarray, np.floating]
ShapeFunction = Callable[[Counts], Counts]
SHAPES: dict[str, tuple[ShapeFunction, str]] = {
    "bandwidth": (
        lambda p: 1 - 1 / p,
        "1 - 1/P: a ring all-reduce's bytes per rank, which saturate",
    ),
    "log": (lambda p: np.log2(p), "log2 P: a tree's latency steps"),
    "straggler": (lambda p: np.sqrt(2 * np.log(p)), "sqrt(2 ln P): the slowest of P ranks' steps"),
}
TWO_COUNT_SHAPE = (
    "straggler"  # two node counts cannot tell the shapes apart; this one erred least on the paper
)
BASE_MARGIN = 0.03  # the band's widening at a measured count
MARGIN_PER_DOUBLING = 0.015  # and per doubling of N beyond the largest measured count
KEEP_FACTOR = 3.0  # a shape spans the band while its residual is within 3x the best's...
# ...or within 2% of the node-seconds: closer than repeats of one job differ on a shared machine
KEEP_FLOOR = 0.02
PER_EPOCH_GAIN = 0.5  # the per-epoch term is kept only where it halves the best residual without it
FLAT = "flat"  # no overhead that grows with the ranks: with the per-epoch term, that term alone
MAX_NODES = 10**7  # bound on any node count the model is asked about
MAX_SECONDS = 1e9  # bound on a measured epoch (31 years): node-seconds stay far from overflow


@dataclass(frozen=True)
class Fit:
    """One shape fitted: u(N) = a + b (f(N x ranks_per_node) - f(P0)) + c (N - N0), and its residual
    standard error relative to the mean node-seconds (None: as many parameters as node counts)."""

    shape: str
    per_epoch: bool  # with the fixed per-epoch cost c
    a: float
    b: float
    c: float
    error: float | None
    n0: float = 1.0  # the smallest measured count

    @property
    def name(self) -> str:
        if self.shape == FLAT:
            return "per-epoch"
        return self.shape + (" + per-epoch" if self.per_epoch else "")

    def node_seconds(self, nodes: np.ndarray, ranks_per_node: int) -> np.ndarray:
        f = shape_function(self.shape)
        n = np.asarray(nodes, float)
        return (
            self.a
            + self.b * (f(n * ranks_per_node) - f(np.float64(self.n0 * ranks_per_node)))
            + self.c * (n - self.n0)
        )


@dataclass(frozen=True)
class Model:
    """The fits of one series; seconds(N) is the estimate, band(N) its range."""

    ranks_per_node: int
    nodes: tuple[int, ...]  # the measured node counts, ascending
    node_seconds: tuple[float, ...]  # their medians of N x T
    spread: float  # the largest (max - min) / median of the repeats at a measured count
    fits: tuple[Fit, ...]
    best: Fit
    kept: tuple[Fit, ...]  # the fits that span the band

    def seconds(self, nodes: int) -> float:
        return float(self.best.node_seconds(np.array([nodes]), self.ranks_per_node)[0]) / nodes

    def margin(self, nodes: int) -> float:
        """How much the band is widened at `nodes`, as a fraction."""
        beyond = max(0.0, math.log2(nodes / self.nodes[-1]))
        return BASE_MARGIN + MARGIN_PER_DOUBLING * beyond + self.spread / 2

    def band(self, nodes: int) -> tuple[float, float]:
        """Seconds per epoch from the lowest kept shape's to the highest's, widened by the factor
        1 + margin() each way (a factor, so the low end stays above 0 whatever the spread)."""
        values = [
            float(f.node_seconds(np.array([nodes]), self.ranks_per_node)[0]) / nodes
            for f in self.kept
        ]
        w = self.margin(nodes)
        return min(values) / (1 + w), max(values) * (1 + w)


def shape_function(shape: str) -> ShapeFunction:
    """f of a shape; FLAT's is 0 at every P (no b term)."""
    return (lambda p: np.zeros_like(np.asarray(p, float))) if shape == FLAT else SHAPES[shape][0]


def _residual(fit: Fit) -> float:
    """The error of a fit with more node counts than parameters: every fit compared by it (two
    parameters from three counts, three from four)."""
    if fit.error is None:
        raise ValueError(f"{fit.name}: as many parameters as node counts leave no residual")
    return fit.error


def fit_shape(
    shape: str, nodes: np.ndarray, ranks_per_node: int, *, u: np.ndarray, per_epoch: bool = False
) -> Fit:
    """Least squares with a, b, c >= 0: a coefficient that would come out negative (overhead that
    shrinks with scale, or no time at the smallest count) is held at 0 and the rest refitted."""
    n0 = float(nodes.min())
    f = shape_function(shape)(nodes * ranks_per_node) - shape_function(shape)(
        np.float64(n0 * ranks_per_node)
    )
    columns = {
        "a": np.ones_like(f),
        **({} if shape == FLAT else {"b": f}),
        **({"c": nodes.astype(float) - n0} if per_epoch else {}),
    }
    free = list(columns)
    coef = np.zeros(0)
    while free:
        X = np.column_stack([columns[k] for k in free])
        coef, *_ = np.linalg.lstsq(X, u, rcond=None)
        negative = [k for k, v in zip(free, coef) if v < 0]
        if not negative:
            break
        free.remove(negative[0])
    values = dict(zip(free, (float(v) for v in coef)))
    fitted = Fit(
        shape, per_epoch, values.get("a", 0.0), values.get("b", 0.0), values.get("c", 0.0), None, n0
    )
    dof = len(u) - len(columns)
    if dof > 0:
        residual = fitted.node_seconds(nodes, ranks_per_node) - u
        fitted = Fit(
            shape,
            per_epoch,
            fitted.a,
            fitted.b,
            fitted.c,
            float(math.sqrt(float(residual @ residual) / dof) / float(np.mean(u))),
            n0,
        )
    return fitted


def fit_model(
    nodes: Sequence[int], seconds: Sequence[Sequence[float]], ranks_per_node: int
) -> Model:
    """The model of one series from its measured epoch times (the repeats of each node count).
    Refuses fewer than two node counts: one count says nothing about how the overhead grows."""
    if len(nodes) != len(seconds) or len(set(nodes)) != len(nodes):
        raise KitError(
            "fit_model takes each node count once, with its repeats",
            fix="group the runs by node count",
        )
    order = sorted(range(len(nodes)), key=lambda i: nodes[i])
    counts = np.array([nodes[i] for i in order], float)
    repeats = [np.asarray(seconds[i], float) for i in order]
    if any(
        len(r) == 0 or not np.all(np.isfinite(r)) or np.any(r <= 0) or np.any(r > MAX_SECONDS)
        for r in repeats
    ):
        raise KitError(
            f"fit_model: every node count needs epoch times from above 0 to {MAX_SECONDS:g} s",
            fix="leave out the results whose epoch time is outside",
        )
    if len(counts) < 2:
        raise KitError(
            f"one node count ({int(counts[0]) if len(counts) else 'none'}) cannot show how the overhead "
            "grows",
            fix="measure at least two node counts (kit scale plan --nodes N0,2N0,8N0 "
            "--repeats 3), better three",
        )
    medians = np.array([np.median(r) for r in repeats])
    u = counts * medians
    spread = max(float((r.max() - r.min()) / np.median(r)) for r in repeats)
    fits = [fit_shape(s, counts, ranks_per_node, u=u) for s in SHAPES]
    if (
        len(counts) >= 3
    ):  # a per-epoch cost grows linearly in N: only where it halves the best residual
        plain = min(_residual(f) for f in fits)
        trial = [
            FLAT,
            *(SHAPES if len(counts) >= 4 else ()),
        ]  # alone from 3 counts, with a shape from 4
        fits += [
            f
            for f in (fit_shape(s, counts, ranks_per_node, u=u, per_epoch=True) for s in trial)
            if _residual(f) < PER_EPOCH_GAIN * plain
        ]
    if len(counts) == 2:
        best = next(f for f in fits if f.shape == TWO_COUNT_SHAPE)
        kept = tuple(fits)
    else:
        best = min(fits, key=lambda f: (_residual(f), f.per_epoch))
        reach = max(KEEP_FACTOR * _residual(best), KEEP_FLOOR, spread / 2)
        kept = tuple(f for f in fits if _residual(f) <= reach)
    return Model(
        ranks_per_node,
        tuple(int(n) for n in counts),
        tuple(float(v) for v in u),
        spread,
        tuple(fits),
        best,
        kept,
    )


def next_count(model: Model, target: int, candidates: Sequence[int]) -> tuple[int, float] | None:
    """The node count, of `candidates`, whose measurement would narrow the band at `target` the most
    if it came out as the estimate says (ties: the fewest nodes), with that band's relative
    width."""
    measured = set(model.nodes)
    best: tuple[int, float] | None = None
    for n in sorted(c for c in candidates if c not in measured):
        times = [[v / m] for m, v in zip(model.nodes, model.node_seconds)] + [[model.seconds(n)]]
        trial = fit_model([*model.nodes, n], times, model.ranks_per_node)
        low, high = trial.band(target)
        width = (high - low) / trial.seconds(target)
        if best is None or width < best[1] - 1e-3:
            best = (n, width)
    return best
