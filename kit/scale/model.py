"""The scaling model behind `kit scale predict` (docs/predict.md).

An epoch at N nodes is steps(N) steps of s(P) seconds each, P = N x ranks-per-node ranks, plus a
remainder r(N) paid once per epoch (the data's start, the closing all-reduces). steps(N) follows
from the epoch's showers, the ranks and the batch; s and r are fitted apart, each on what the
results record of it (the steps' time and the rest of the wall epoch):

    s(P) = a + b (h(P) - h(P0))      the time per step, whose overhead grows with the ranks
    r(N) = a + b (h(N) - h(N0))      the per-epoch cost, constant (b = 0) or growing with the nodes

with a, b >= 0 and P0, N0 those of the smallest measured count. Results without step times are
fitted whole: the node-seconds u(N) = N x T(N), flat under ideal scaling, as s(P) is.

h is one of a family of shapes, each with a reason to be there: the power family
(x^g - 1) / g, g from -1 to 1 (-1: 1 - 1/x, a ring all-reduce's bytes per rank, which saturate;
0: log2 x, a tree's latency steps; 1: x, contention every rank adds, or cores all nodes share), and
sqrt(2 ln x), the slowest of x ranks' steps. The per-epoch cost takes g from 0 to 1 (log N to
linear N) or stays constant.

The estimate is the named shape (bandwidth, log, straggler, linear; constant, log N, linear N)
with the smallest residual standard error, so a parameter must earn its place; the fitted power
law competes from 4 counts. The band spans every shape of the family the calibration cannot rule
out (its residual within reach of the best's, at the noise the repeats show), each widened by its
own prediction error at that noise, and by a margin per doubling the calibration measures on itself:
how far the shapes fitted without the largest count missed it. Nothing reads a network figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kit.errors import KitError

MAX_NODES = 10**7  # bound on any node count the model is asked about
MAX_SECONDS = 1e9  # bound on a measured epoch (31 years): node-seconds stay far from overflow
STRAGGLER = "straggler"  # sqrt(2 ln x); every other shape is the power family's g
POWER = "power"
CONSTANT = "constant"
# The power family's exponents: a grid, so the fit is bounded work and the band sees every shape.
STEP_GAMMAS = tuple(round(g, 2) for g in np.linspace(-1.0, 1.0, 21))
EPOCH_GAMMAS = tuple(round(g, 2) for g in np.linspace(0.0, 1.0, 11))
NAMED = {-1.0: "bandwidth", 0.0: "log", 1.0: "linear"}  # g of the named shapes
# Two counts cannot tell the shapes apart; this one erred least on the paper.
TWO_COUNT_SHAPE = STRAGGLER
# The noise of a median is taken as at least 0.5% of the values (timers, not physics), and as 1%
# where no count was repeated (the spread is then not measured).
NOISE_FLOOR, UNREPEATED_NOISE = 0.005, 0.01
# The per-epoch cost's noise grows with it, as a share of it (at least 1% of the epoch's).
RELATIVE_FLOOR = 0.01
# Linear, the steepest shape, is the estimate only where it halves the others' residual.
LINEAR_GAIN = 0.5
# A shape spans the band while its residual sum is within REACH noise variances of the least; each
# shape's own band reaches Z prediction errors each way.
REACH, Z = 2.0, 1.5
MEDIAN_VARIANCE = math.pi / 2  # variance of a median of n normal repeats: pi/2 x that of one / n


@dataclass(frozen=True)
class Fit:
    """One shape fitted on one part: y(x) = a + b (h(x) - h(x0)), and its residual standard error
    relative to the mean y (None: as many parameters as node counts)."""

    shape: str  # STRAGGLER, POWER (with gamma) or CONSTANT
    gamma: float | None
    a: float
    b: float
    error: float | None
    x0: float
    rss: float = 0.0  # the residual sum of squares, in the part's units squared
    parameters: int = 2
    # of (a, b) per noise variance, (X'X)^-1; 0 for a coefficient held
    covariance: tuple[tuple[float, float], tuple[float, float]] = ((0.0, 0.0), (0.0, 0.0))

    @property
    def name(self) -> str:
        if self.shape != POWER or self.gamma is None:
            return self.shape
        return NAMED.get(self.gamma, f"power {self.gamma:+.2f}")

    def at(self, x: np.ndarray | float) -> np.ndarray:
        x = np.asarray(x, float)
        return self.a + self.b * (
            _h(self.shape, self.gamma, x) - _h(self.shape, self.gamma, np.float64(self.x0))
        )

    def spread(self, x: float, sigma: float) -> float:
        """The prediction error of this fit at x, for noise sigma on each fitted value."""
        (caa, cab), (_, cbb) = self.covariance
        f = float(
            _h(self.shape, self.gamma, np.float64(x))
            - _h(self.shape, self.gamma, np.float64(self.x0))
        )
        return sigma * math.sqrt(max(0.0, caa + 2 * cab * f + cbb * f * f))


def _h(shape: str, gamma: float | None, x: np.ndarray | np.floating) -> np.ndarray:
    x = np.asarray(x, float)
    if shape == CONSTANT:
        return np.zeros_like(x)
    if shape == STRAGGLER:
        return np.sqrt(2 * np.log(x))
    assert gamma is not None
    return np.log2(x) if gamma == 0 else (x**gamma - 1) / gamma


def fit_shape(
    shape: str, gamma: float | None, *, x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None
) -> Fit:
    """Least squares (weighted by w, default 1) with a, b >= 0: overhead that would shrink with
    scale is held at 0 (the constant), a fit with no time at the smallest count goes through 0
    there. Closed forms: two parameters, a few counts, called a few hundred times per forecast."""
    x0 = float(x.min())
    w = np.ones_like(y) if w is None else w
    f = _h(shape, gamma, x) - _h(shape, gamma, np.float64(x0))
    n, sf, sff = float(w.sum()), float(w @ f), float(w @ (f * f))
    sy, sfy = float(w @ y), float(w @ (f * y))
    det = n * sff - sf * sf
    a, b, cov = sy / n, 0.0, ((1 / n, 0.0), (0.0, 0.0))  # the constant
    if shape != CONSTANT and det > 1e-12 * max(1.0, n * sff):
        b = (n * sfy - sf * sy) / det
        a, cov = (sy - b * sf) / n, ((sff / det, -sf / det), (-sf / det, n / det))
        if b < 0:
            a, b, cov = sy / n, 0.0, ((1 / n, 0.0), (0.0, 0.0))
        elif a < 0:
            a, b, cov = 0.0, sfy / sff, ((0.0, 0.0), (0.0, 1 / sff))
    residual = a + b * f - y
    rss = float(w @ (residual * residual))
    params = (1 if shape == CONSTANT else 2) + (
        1 if shape == POWER and gamma is not None and gamma not in NAMED else 0
    )
    dof = len(y) - params
    mean = sy / n
    error = math.sqrt(rss / dof) / mean if dof > 0 and mean > 0 else None
    return Fit(
        shape=shape,
        gamma=gamma,
        a=a,
        b=b,
        error=error,
        x0=x0,
        rss=rss,
        parameters=params,
        covariance=cov,
    )


@dataclass(frozen=True)
class Part:
    """One part of the epoch fitted on its own: its measurements, every shape of its family, the
    estimate and the shapes that span the band."""

    what: str  # "step" (s/step over the ranks), "per-epoch" (s over the nodes), "node-seconds"
    per_node: int  # x = nodes x per_node: ranks for the step and node-seconds, 1 for per-epoch
    nodes: tuple[int, ...]
    medians: tuple[float, ...]
    sigma: float  # the noise of one median, in the part's units
    fits: tuple[Fit, ...]  # the family
    best: Fit
    kept: tuple[Fit, ...]  # the shapes the calibration cannot rule out
    per_doubling: float  # the band's widening per doubling beyond the largest measured count
    repeated: bool = True  # some count was measured more than once: the noise is measured
    weights: tuple[float, ...] = ()  # each count's in the fit (1: all alike)

    def value(self, nodes: float) -> float:
        return float(self.best.at(nodes * self.per_node))

    def band(self, nodes: float) -> tuple[float, float]:
        x = nodes * self.per_node
        lows, highs = [], []
        for f in self.kept:
            v, e = float(f.at(x)), Z * f.spread(x, self.sigma)
            lows.append(v - e)
            highs.append(v + e)
        widen = 1 + self.per_doubling * max(0.0, math.log2(nodes / self.nodes[-1]))
        # overhead never shrinks: nothing below what the kept shapes give the smallest count
        floor = min(float(f.at(self.nodes[0] * self.per_node)) for f in self.kept)
        low = max(min(lows), floor, 0.0) / widen
        return low, max(highs) * widen


def _error(fit: Fit) -> float:
    return fit.error if fit.error is not None else math.inf


def _noise(repeats: Sequence[np.ndarray], w: np.ndarray) -> float:
    """The noise of one median at unit weight, pooled over the counts' repeats (0: no count was
    repeated)."""
    dof = sum(len(r) - 1 for r in repeats)
    if dof == 0:
        return 0.0
    var = sum(wi * float(((r - r.mean()) ** 2).sum()) for wi, r in zip(w, repeats)) / dof
    n = float(np.mean([len(r) for r in repeats]))
    return math.sqrt(MEDIAN_VARIANCE * var / n) if n > 1 else math.sqrt(var)


def fit_part(
    what: str,
    nodes: Sequence[int],
    repeats: Sequence[Sequence[float] | np.ndarray],
    *,
    per_node: int,
    sigma: float | None = None,
    repeated: bool | None = None,
    scales: Sequence[float] | None = None,
) -> Part:
    """One part from the repeats of each count (ascending nodes); `sigma` and `repeated` override
    the noise and whether it was measured (a measurement imagined at the estimate adds neither).
    `scales`: what each count's noise grows with (the per-epoch cost is a wall epoch less its
    steps, so its noise is the wall epoch's); each count is weighted by (scale there / the
    smallest count's)^-2, and the noise is the smallest count's."""
    counts = np.array(nodes, float)
    reps = [np.asarray(r, float) for r in repeats]
    y = np.array([float(np.median(r)) for r in reps])
    x = counts * per_node
    w = np.ones_like(y) if scales is None else (scales[0] / np.asarray(scales, float)) ** 2
    epoch = what == "per-epoch"
    family = [fit_shape(CONSTANT if epoch else STRAGGLER, None, x=x, y=y, w=w)]
    family += [fit_shape(POWER, g, x=x, y=y, w=w) for g in (EPOCH_GAMMAS if epoch else STEP_GAMMAS)]
    named = [f for f in family if f.shape != POWER or f.gamma in ((0.0, 1.0) if epoch else NAMED)]
    if len(counts) >= 4:  # the power law earns its third parameter from 4 counts
        named.append(min((f for f in family if f.name.startswith(POWER)), key=lambda f: f.rss))
    if len(counts) == 2:
        best = next(f for f in named if f.shape == (CONSTANT if epoch else TWO_COUNT_SHAPE))
    else:
        best = min(named, key=lambda f: (_error(f), f.parameters))
        if best.gamma == 1.0:
            rest = min(
                (f for f in named if f.gamma != 1.0), key=lambda f: (_error(f), f.parameters)
            )
            best = best if _error(best) < LINEAR_GAIN * _error(rest) else rest
    repeated = any(len(r) > 1 for r in reps) if repeated is None else repeated
    floor = (NOISE_FLOOR if repeated else UNREPEATED_NOISE) * float(np.mean(np.abs(y)))
    floor = floor or NOISE_FLOOR
    fitted = math.sqrt(best.rss / (len(y) - best.parameters)) if len(y) > best.parameters else 0.0
    noise = max(_noise(reps, w) if sigma is None else sigma, fitted, floor)
    least = min(f.rss for f in family)
    kept = tuple(f for f in family if f.rss <= least + REACH * noise**2 or f is best)
    part = Part(
        what=what,
        per_node=per_node,
        nodes=tuple(int(n) for n in counts),
        medians=tuple(float(v) for v in y),
        sigma=noise,
        fits=tuple(family),
        best=best,
        kept=kept,
        per_doubling=0.0,
        repeated=repeated,
        weights=tuple(float(v) for v in w),
    )
    return replace(part, per_doubling=_per_doubling(part))


def _per_doubling(part: Part) -> float:
    """The band's widening per doubling beyond the largest measured count: how far the kept
    shapes, fitted without the largest count, missed it beyond their own prediction error (per
    doubling from the count below); where no count was repeated, at least the noise assumed for a
    median (the runs did not measure it)."""
    noise = 0.0 if part.repeated else part.sigma / max(float(np.mean(part.medians)), 1e-12)
    if len(part.nodes) < 3:
        return noise
    x = np.array(part.nodes[:-1], float) * part.per_node
    y = np.array(part.medians[:-1])
    w = np.array(part.weights[:-1]) if part.weights else None
    top = part.nodes[-1] * part.per_node
    truth = part.medians[-1]
    doublings = math.log2(part.nodes[-1] / part.nodes[-2])
    misses = []
    for f in part.kept:
        trial = fit_shape(f.shape, f.gamma, x=x, y=y, w=w)
        miss = abs(float(trial.at(top)) - truth) - Z * trial.spread(top, part.sigma)
        misses.append(max(0.0, miss) / max(truth, 1e-12))
    return max(noise, min(misses) / doublings)


@dataclass(frozen=True)
class Model:
    """The parts of one series; seconds(N) is the estimate, band(N) its range. With `per_epoch`
    None the epoch was fitted whole (`step` is then the node-seconds)."""

    ranks_per_node: int
    nodes: tuple[int, ...]  # the measured node counts, ascending
    node_seconds: tuple[float, ...]  # their medians of N x T (a full epoch's)
    spread: float  # the largest (max - min) / median of the repeats at a measured count
    step: Part
    per_epoch: Part | None
    events_per_epoch: int | None = None
    batch_per_rank: int | None = None

    @property
    def best(self) -> Fit:
        return self.step.best

    def steps(self, nodes: int) -> int:
        """Steps of a full epoch at `nodes` (as gan3d's data stream cuts it)."""
        assert self.events_per_epoch and self.batch_per_rank
        return self.events_per_epoch // (nodes * self.ranks_per_node) // self.batch_per_rank

    def parts(self, nodes: int) -> tuple[float, float] | None:
        """(seconds in steps, seconds paid once per epoch) at `nodes`; None when fitted whole."""
        if self.per_epoch is None:
            return None
        return self.steps(nodes) * self.step.value(nodes), self.per_epoch.value(nodes)

    def seconds(self, nodes: int) -> float:
        parts = self.parts(nodes)
        return sum(parts) if parts else self.step.value(nodes) / nodes

    def band(self, nodes: int) -> tuple[float, float]:
        if self.per_epoch is None:
            low, high = self.step.band(nodes)
            return low / nodes, high / nodes
        steps, (s_low, s_high) = self.steps(nodes), self.step.band(nodes)
        e_low, e_high = self.per_epoch.band(nodes)
        return steps * s_low + e_low, steps * s_high + e_high

    def describe(self) -> str:
        """The estimate's shapes, e.g. `log steps + constant per-epoch`."""
        if self.per_epoch is None:
            return f"{self.step.best.name} (whole epoch)"
        return f"{self.step.best.name} steps + {self.per_epoch.best.name} per-epoch"


def _check(nodes: Sequence[int], seconds: Sequence[Sequence[float]]) -> None:
    if len(nodes) != len(seconds) or len(set(nodes)) != len(nodes):
        raise KitError(
            "fit_model takes each node count once, with its repeats",
            fix="group the runs by node count",
        )
    if any(
        len(r) == 0 or not all(math.isfinite(v) and 0 < v <= MAX_SECONDS for v in r)
        for r in seconds
    ):
        raise KitError(
            f"fit_model: every node count needs epoch times from above 0 to {MAX_SECONDS:g} s",
            fix="leave out the results whose epoch time is outside",
        )
    if len(nodes) < 2:
        raise KitError(
            f"one node count ({nodes[0] if nodes else 'none'}) cannot show how the overhead grows",
            fix="measure at least two node counts (kit scale plan --nodes N0,2N0,8N0 --repeats 3), "
            "better three",
        )


def fit_model(
    nodes: Sequence[int],
    seconds: Sequence[Sequence[float]],
    ranks_per_node: int,
    *,
    step_seconds: Sequence[Sequence[float]] | None = None,
    rest_seconds: Sequence[Sequence[float]] | None = None,
    events_per_epoch: int | None = None,
    batch_per_rank: int | None = None,
) -> Model:
    """The model of one series. With each run's time per step and per-epoch remainder (and the
    epoch's showers and batch, which give steps(N)), the two are fitted apart; else the wall
    epochs (`seconds`, full epochs) are fitted whole. Refuses fewer than two node counts."""
    _check(nodes, seconds)
    order = sorted(range(len(nodes)), key=lambda i: nodes[i])
    counts = [int(nodes[i]) for i in order]
    walls = [np.asarray(seconds[i], float) for i in order]
    spread = max(float((r.max() - r.min()) / np.median(r)) for r in walls)
    split = step_seconds is not None and rest_seconds is not None
    split = split and bool(events_per_epoch and batch_per_rank)
    if split:
        assert step_seconds is not None and rest_seconds is not None
        steps = [np.asarray(step_seconds[i], float) for i in order]
        rests = [np.asarray(rest_seconds[i], float) for i in order]
        assert events_per_epoch and batch_per_rank
        epochs = [
            events_per_epoch // (n * ranks_per_node) // batch_per_rank * float(np.median(s))
            + float(np.median(r))
            for n, s, r in zip(counts, steps, rests)
        ]
        model = Model(
            ranks_per_node=ranks_per_node,
            nodes=tuple(counts),
            node_seconds=(),
            spread=spread,
            step=fit_part("step", counts, steps, per_node=ranks_per_node),
            per_epoch=fit_part(
                "per-epoch",
                counts,
                rests,
                per_node=1,
                scales=[
                    max(float(np.median(r)), RELATIVE_FLOOR * e) for r, e in zip(rests, epochs)
                ],
            ),
            events_per_epoch=events_per_epoch,
            batch_per_rank=batch_per_rank,
        )
        return replace(model, node_seconds=tuple(n * e for n, e in zip(counts, epochs)))
    u = [n * w for n, w in zip(counts, walls)]
    return Model(
        ranks_per_node=ranks_per_node,
        nodes=tuple(counts),
        node_seconds=tuple(float(np.median(v)) for v in u),
        spread=spread,
        step=fit_part("node-seconds", counts, u, per_node=ranks_per_node),
        per_epoch=None,
        events_per_epoch=events_per_epoch,
        batch_per_rank=batch_per_rank,
    )


def _with_count(part: Part, nodes: int, scale: float) -> Part:
    """The part refitted as if `nodes` had been measured and landed on the estimate; `scale` is
    what its noise grows with there, against the smallest count (see fit_part)."""
    counts = sorted({*part.nodes, nodes})
    values = dict(zip(part.nodes, part.medians))
    values[nodes] = part.value(nodes)
    scales = dict(zip(part.nodes, (1 / math.sqrt(w) for w in part.weights)))
    scales[nodes] = scale
    return fit_part(
        part.what,
        counts,
        [[values[n]] for n in counts],
        per_node=part.per_node,
        sigma=part.sigma,
        repeated=part.repeated,
        scales=[scales[n] for n in counts] if part.what == "per-epoch" else None,
    )


def next_count(model: Model, target: int, candidates: Sequence[int]) -> tuple[int, float] | None:
    """The node count, of `candidates`, whose measurement would narrow the band at `target` the most
    if it came out as the estimate says (ties: the fewest nodes), with that band's relative
    width."""
    found: tuple[int, float] | None = None
    for n in sorted(c for c in candidates if c not in model.nodes):
        trial = replace(
            model,
            step=_with_count(model.step, n, 1.0),
            per_epoch=(
                _with_count(
                    model.per_epoch,
                    n,
                    max(model.per_epoch.value(n), RELATIVE_FLOOR * model.seconds(n))
                    / max(
                        model.per_epoch.medians[0],
                        RELATIVE_FLOOR * model.node_seconds[0] / model.nodes[0],
                    ),
                )
                if model.per_epoch
                else None
            ),
        )
        low, high = trial.band(target)
        width = (high - low) / trial.seconds(target)
        if found is None or width < found[1] - 1e-3:
            found = (n, width)
    return found
