"""The search space of a study: typed parameters,
conditions, sampling, a grid, and a numeric encoding.

Pure Python (``random.Random``, no numpy): grid and random studies need nothing beyond the kit's
core, and every searcher draws from the same code. Values are snapped (floats to 6 significant
digits, ints to whole numbers) so that a config reads well in a command line and a ledger, and
two configs that a training run cannot tell apart share one ``key``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from kit.errors import KitError
from kit.excerpt import shown

Value = Union[str, int, float, bool]
KINDS = ("float", "int", "choice")
MAX_GRID = 100_000  # grid points a study may enumerate: far past any budget of trainings
INACTIVE = -1.0  # encoding of an inactive numeric parameter: outside the [0, 1] of active ones
SIGNIFICANT = 6  # digits a sampled float keeps


def _snap_float(value: float, low: float, high: float) -> float:
    return min(max(float(f"{value:.{SIGNIFICANT}g}"), low), high)


def _round_half_up(value: float) -> int:
    # round() is banker's: it would merge evenly spaced grid ints
    return int(math.floor(value + 0.5))


def same_value(a: Any, b: Any) -> bool:
    """Equality that keeps True apart from 1 and "1" apart from 1 (a choice's values are typed);
    whole and real numbers compare by value."""
    if isinstance(a, (bool, str)) or isinstance(b, (bool, str)):
        return type(a) is type(b) and a == b
    return a == b


@dataclass(frozen=True)
class Param:
    """One parameter: float or int in [low, high] (log: uniform in log space), or a choice of
    values. ``when`` maps earlier choice parameters to the values under which this one is active."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    values: tuple[Value, ...] = ()
    when: Mapping[str, tuple[Value, ...]] = field(default_factory=dict)

    @property
    def bounds(self) -> tuple[float, float]:
        """low and high of a float or int parameter (problem() names one without them)."""
        if self.low is None or self.high is None:
            raise ValueError(f"parameter {self.name}: a {self.kind} parameter needs low and high")
        return self.low, self.high

    def problem(self) -> str | None:
        """What is wrong with this parameter's own definition (None: nothing)."""
        if self.kind not in KINDS:
            return f"type {shown(self.kind)} is not one of {', '.join(KINDS)}"
        if self.kind == "choice":
            if not self.values:
                return "a choice needs at least one value"
            if any(
                not isinstance(v, (str, int, float, bool))
                or isinstance(v, float)
                and not math.isfinite(v)
                for v in self.values
            ):
                return "choice values must be strings, whole numbers, finite numbers or booleans"
            if any(same_value(a, b) for a, b in itertools.combinations(self.values, 2)):
                return "a choice lists a value twice"
            return None
        if self.low is None or self.high is None:
            return f"a {self.kind} parameter needs low and high"
        low, high = self.bounds
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
            return f"low {low!r} must be below high {high!r} (both finite)"
        if self.log and low <= 0:
            return f"a log scale needs low > 0 (low is {low!r})"
        return None

    def unit(self, value: Value) -> float:
        """A numeric value mapped to [0, 1] (log-scaled when log)."""
        low, high = self.bounds
        lo, hi, v = float(low), float(high), float(value)
        if self.log:
            lo, hi, v = math.log(lo), math.log(hi), math.log(v)
        return (v - lo) / (hi - lo)

    def from_unit(self, u: float) -> Value:
        """The snapped value at ``u`` in [0, 1]: every whole number of an int axis gets an equal
        share of it (of its log space when log)."""
        u = min(max(u, 0.0), 1.0)
        low, high = self.bounds
        if self.kind == "float":
            return _snap_float(self.exact(u), low, high)
        if self.log:
            v = math.exp(math.log(low) + u * (math.log(high + 1) - math.log(low)))
        else:
            v = low + u * (high - low + 1)
        return min(max(int(math.floor(v)), int(low)), int(high))

    def exact(self, u: float) -> float:
        """The real number at ``u`` of [low, high] (log-spaced when log), not snapped."""
        low, high = self.bounds
        if self.log:
            return math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
        return low + u * (high - low)

    def axis(self, points: int) -> list[Value]:
        """The grid values of this parameter: every choice, or ``points`` evenly spaced from low to
        high (in log space when log), deduplicated after snapping, in increasing order."""
        if self.kind == "choice":
            return list(self.values)
        raw = [self.exact(i / (points - 1)) for i in range(points)]
        low, high = self.bounds
        snapped: set[int] | set[float]
        if self.kind == "int":
            snapped = {min(max(_round_half_up(v), int(low)), int(high)) for v in raw}
        else:
            snapped = {_snap_float(v, low, high) for v in raw}
        return sorted(snapped)

    def canonical(self, value: Any) -> Value:
        """``value`` as this parameter holds it (an int given for a float becomes a float), or
        KitError.
        """
        if self.kind == "choice":
            for v in self.values:
                if same_value(v, value):
                    return v
            raise KitError(
                f"parameter {self.name}: {shown(value)} is not one of its values",
                fix=f"give one of {shown(list(self.values))}",
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise KitError(
                f"parameter {self.name}: {shown(value)} is not a number", fix="give a number"
            )
        # no float holds it: outside any range
        if isinstance(value, int) and value.bit_length() > 64:
            raise KitError(
                f"parameter {self.name}: {shown(value)} is outside [{self.low!r}, {self.high!r}]",
                fix="give a value in that range",
            )
        if self.kind == "int" and not (isinstance(value, int) or float(value).is_integer()):
            raise KitError(
                f"parameter {self.name}: {shown(value)} is not a whole number",
                fix="give a whole number",
            )
        low, high = self.bounds
        if not math.isfinite(value) or not low <= value <= high:
            raise KitError(
                f"parameter {self.name}: {shown(value)} is outside [{self.low!r}, {self.high!r}]",
                fix="give a value in that range",
            )
        return int(value) if self.kind == "int" else float(value)


def real(name: str, low: float, high: float, *, log: bool = False, when=None) -> Param:
    return Param(
        name=name,
        kind="float",
        low=float(low),
        high=float(high),
        log=log,
        values=(),
        when=_when(when),
    )


def integer(name: str, low: int, high: int, *, log: bool = False, when=None) -> Param:
    return Param(
        name=name, kind="int", low=int(low), high=int(high), log=log, values=(), when=_when(when)
    )


def choice(name: str, values: Sequence[Value], when=None) -> Param:
    return Param(
        name=name,
        kind="choice",
        low=None,
        high=None,
        log=False,
        values=tuple(values),
        when=_when(when),
    )


def _when(when: Mapping[str, Any] | None) -> dict[str, tuple[Value, ...]]:
    return {k: tuple(v) if isinstance(v, (list, tuple)) else (v,) for k, v in (when or {}).items()}


class Space:
    """Parameters in order; a condition may only name an earlier choice parameter and its values."""

    def __init__(self, params: Sequence[Param]) -> None:
        self.params: tuple[Param, ...] = tuple(params)
        seen: dict[str, Param] = {}
        for p in self.params:
            problem = p.problem()
            if p.name in seen:
                problem = "the name is used twice"
            for other, values in p.when.items():
                ref = seen.get(other)
                if ref is None or ref.kind != "choice":
                    problem = problem or f"when: {shown(other)} is not an earlier choice parameter"
                elif not values or any(
                    not any(same_value(v, c) for c in ref.values) for v in values
                ):
                    problem = (
                        problem
                        or f"when: {other} values {shown(list(values))} are not among its values"
                    )
            if problem:
                raise KitError(
                    f"parameter {p.name}: {problem}", fix="correct the parameter (kit docs study)"
                )
            seen[p.name] = p
        if not self.params:
            raise KitError("a study needs at least one parameter", fix="give one under parameters:")
        self.by_name = seen

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def active(self, param: Param, config: Mapping[str, Value]) -> bool:
        """Whether ``param`` is active given the (earlier) values in ``config``."""
        return all(
            other in config and any(same_value(config[other], v) for v in values)
            for other, values in param.when.items()
        )

    def _value(self, param: Param, rng: random.Random) -> Value:
        if param.kind == "choice":
            return param.values[rng.randrange(len(param.values))]
        return param.from_unit(rng.random())

    def sample(self, rng: random.Random) -> dict[str, Value]:
        """One config drawn uniformly per parameter (log-uniform where log), inactive ones left
        out.
        """
        config: dict[str, Value] = {}
        for p in self.params:
            if self.active(p, config):
                config[p.name] = self._value(p, rng)
        return config

    def perturb(
        self, config: Mapping[str, Value], rng: random.Random, sigma: float = 0.1
    ) -> dict[str, Value]:
        """A neighbour of ``config``: numeric values moved by a normal step of ``sigma`` of their
        axis, each choice redrawn with probability 1/len(params); parameters a changed choice
        activates are drawn afresh, those it deactivates dropped."""
        out: dict[str, Value] = {}
        flip = 1.0 / len(self.params)
        for p in self.params:
            if not self.active(p, out):
                continue
            if p.name not in config:
                out[p.name] = self._value(p, rng)
            elif p.kind == "choice":
                out[p.name] = self._value(p, rng) if rng.random() < flip else config[p.name]
            else:
                out[p.name] = p.from_unit(p.unit(config[p.name]) + rng.gauss(0.0, sigma))
        return out

    def grid(self, points_per_axis: int) -> list[dict[str, Value]]:
        """Every combination of the axes' values (choices: all values; numeric:
        ``points_per_axis``), conditions respected: an inactive parameter is left out, so no config
        appears twice."""
        if points_per_axis < 2:
            raise KitError(
                f"a grid needs at least 2 points per axis (got {points_per_axis})",
                fix="give 2 or more; a parameter with one value belongs in fixed:",
            )
        axes = {p.name: p.axis(points_per_axis) for p in self.params}
        out: list[dict[str, Value]] = []

        def walk(i: int, config: dict[str, Value]) -> Iterator[dict[str, Value]]:
            if i == len(self.params):
                yield dict(config)
                return
            p = self.params[i]
            if not self.active(p, config):
                yield from walk(i + 1, config)
                return
            for v in axes[p.name]:
                config[p.name] = v
                yield from walk(i + 1, config)
            del config[p.name]

        for config in walk(0, {}):
            if len(out) == MAX_GRID:
                raise KitError(
                    f"the grid has more than {MAX_GRID} points",
                    fix="fewer points per axis or fewer parameters",
                )
            out.append(config)
        return out

    def encode(self, config: Mapping[str, Value]) -> list[float]:
        """The config as a fixed-length vector for a surrogate: numeric values in [0, 1] (log-scaled
        where log) or INACTIVE; a choice one-hot, all zeros when inactive."""
        vector: list[float] = []
        for p in self.params:
            present = p.name in config
            if p.kind == "choice":
                vector += [
                    1.0 if present and same_value(config[p.name], v) else 0.0 for v in p.values
                ]
            else:
                vector.append(p.unit(config[p.name]) if present else INACTIVE)
        return vector

    def canonical(self, config: Mapping[str, Any]) -> dict[str, Value]:
        """``config`` checked and in the space's order and types; KitError naming the parameter."""
        if not isinstance(config, Mapping):
            raise KitError(
                f"a config must be a mapping of parameter names to values, not {shown(config)}",
                fix="give name: value pairs",
            )
        unknown = [k for k in config if k not in self.by_name]
        if unknown:
            raise KitError(
                f"parameter {shown(unknown[0])} is not in the space",
                fix=f"give only {', '.join(self.names)}",
            )
        out: dict[str, Value] = {}
        for p in self.params:
            if self.active(p, out):
                if p.name not in config:
                    raise KitError(
                        f"parameter {p.name}: missing, and it is active", fix="give it a value"
                    )
                out[p.name] = p.canonical(config[p.name])
            elif p.name in config:
                raise KitError(
                    f"parameter {p.name}: given, "
                    f"but inactive (its condition {shown(dict(p.when))} does not hold)",
                    fix="leave it out where its condition does not hold",
                )
        return out

    def validate(self, config: Mapping[str, Any]) -> None:
        """Raise KitError naming the parameter if ``config`` is not a point of this space."""
        self.canonical(config)

    def key(self, config: Mapping[str, Any]) -> tuple:
        """A hashable identity: two configs with the same key are the same training (a choice by its
        position, a number to 12 significant digits, so a ledger's round trip keeps the key)."""
        out: list[tuple[str, float]] = []  # (name, choice index or number)
        for name, v in self.canonical(config).items():
            p = self.by_name[name]
            if p.kind == "choice":
                out.append((name, next(i for i, c in enumerate(p.values) if same_value(c, v))))
            else:
                out.append((name, float(f"{v:.12g}")))
        return tuple(out)
