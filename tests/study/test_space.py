"""The search space: every sample, grid point and perturbation is a valid config inside its bounds with
its conditions respected; the grid enumerates exactly the distinct active combinations; the
encoding has a fixed length and survives a ledger's YAML round trip."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kit.errors import KitError
from kit.study.space import INACTIVE, Param, Space, choice, integer, real, same_value


@st.composite
def params(draw, name: str, earlier: list):
    kind = draw(st.sampled_from(["float", "int", "choice"]))
    choices = [p for p in earlier if p.kind == "choice"]
    when = {}
    if choices and draw(st.booleans()):
        ref = draw(st.sampled_from(choices))
        when[ref.name] = draw(
            st.lists(st.sampled_from(ref.values), min_size=1, max_size=len(ref.values), unique=True)
        )
    if kind == "choice":
        values = draw(
            st.one_of(
                st.lists(
                    st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4, unique=True
                ),
                st.lists(st.integers(-3, 64), min_size=1, max_size=4, unique=True),
            )
        )
        return choice(name, values, when)
    log = draw(st.booleans())
    if kind == "int":
        low = draw(st.integers(1 if log else -20, 50))
        return integer(name, low, low + draw(st.integers(1, 200)), log=log, when=when)
    if log:
        low = draw(st.sampled_from([1e-5, 1e-3, 0.02, 1.0, 3.0]))
        return real(
            name, low, low * draw(st.sampled_from([2.0, 10.0, 1000.0])), log=True, when=when
        )
    low = draw(st.integers(-100, 100)) / 8
    return real(name, low, low + draw(st.integers(4, 800)) / 8, log=False, when=when)


@st.composite
def spaces(draw, max_params: int = 5):
    out: list = []
    for i in range(draw(st.integers(1, max_params))):
        out.append(draw(params(f"p{i}", out)))
    return Space(out)


def check_point(space: Space, config: dict) -> None:
    """Valid, inside bounds, exactly the active parameters present, values of the right type."""
    space.validate(config)
    assert list(config) == [p.name for p in space.params if p.name in config]
    partial: dict = {}
    for p in space.params:
        active = all(
            o in partial and any(same_value(partial[o], v) for v in vs) for o, vs in p.when.items()
        )
        assert (p.name in config) == active, (p.name, config)
        if not active:
            continue
        value = partial[p.name] = config[p.name]
        if p.kind == "choice":
            assert any(same_value(value, v) for v in p.values)
        else:
            assert p.low <= value <= p.high and isinstance(value, int if p.kind == "int" else float)
            assert not isinstance(value, bool)


@given(spaces(), st.integers(0, 2**32 - 1))
def test_every_sample_and_perturbation_is_a_valid_point(space, seed):
    rng = random.Random(seed)
    for _ in range(5):
        config = space.sample(rng)
        check_point(space, config)
        check_point(space, space.perturb(config, rng, sigma=rng.choice([0.01, 0.3, 5.0])))


def _project(space: Space, combo: dict) -> tuple:
    """A full combination (every parameter set) cut down to what its conditions leave active."""
    out: dict = {}
    for p in space.params:
        if all(o in out and any(same_value(out[o], v) for v in vs) for o, vs in p.when.items()):
            out[p.name] = combo[p.name]
    return space.key(out)


@given(spaces(max_params=4), st.integers(2, 4))
def test_the_grid_is_every_distinct_active_combination_once(space, points):
    grid = space.grid(points)
    for config in grid:
        check_point(space, config)
    keys = [space.key(c) for c in grid]
    assert len(set(keys)) == len(keys)  # no duplicates
    axes = [p.axis(points) for p in space.params]
    # The oracle: the full product ignoring conditions, each cut to its active part, deduplicated.
    expected = {
        _project(space, dict(zip(space.names, combo))) for combo in itertools.product(*axes)
    }
    assert set(keys) == expected
    encodings = [tuple(space.encode(c)) for c in grid]
    assert len(set(encodings)) == len(encodings)  # the surrogate can tell every grid point apart


@given(st.integers(-50, 50), st.integers(1, 300), st.integers(2, 12), st.booleans())
def test_an_int_axis_has_min_points_and_range_values_ends_included(low, width, points, log):
    if log:
        low = abs(low) + 1
    axis = integer("n", low, low + width, log=log).axis(points)
    assert axis[0] == low and axis[-1] == low + width and axis == sorted(set(axis))
    if not log:
        assert len(axis) == min(points, width + 1)
    else:
        assert len(axis) <= points


@given(st.sampled_from([1e-4, 0.5, 2.0]), st.sampled_from([10.0, 1e3]), st.integers(2, 9))
def test_a_log_axis_is_evenly_spaced_in_log_space(low, factor, points):
    axis = real("lr", low, low * factor, log=True).axis(points)
    assert len(axis) == points and axis[0] == low and axis[-1] == pytest.approx(low * factor)
    ratios = [b / a for a, b in zip(axis, axis[1:])]
    assert max(ratios) == pytest.approx(min(ratios), rel=1e-4)


def test_the_grid_count_of_a_conditioned_space():
    """optimizer sgd: 3 momenta; adam: none; 3 learning rates x 2 batch sizes in each branch."""
    space = Space(
        [
            real("lr", 1e-4, 1e-2, log=True),
            choice("bs", [8, 16]),
            choice("opt", ["adam", "sgd"]),
            real("momentum", 0.0, 0.9, when={"opt": "sgd"}),
        ]
    )
    grid = space.grid(3)
    assert len(grid) == 3 * 2 * (1 + 3)
    assert sorted({c["lr"] for c in grid}) == [1e-4, 1e-3, 1e-2]
    assert all(("momentum" in c) == (c["opt"] == "sgd") for c in grid)


@given(spaces(), st.integers(0, 2**32 - 1))
def test_encode_is_fixed_length_stable_and_survives_a_yaml_round_trip(space, seed):
    rng = random.Random(seed)
    for _ in range(4):
        config = space.sample(rng)
        vector = space.encode(config)
        assert len(vector) == sum(
            len(p.values) if p.kind == "choice" else 1 for p in space.params
        )  # one per number, one per choice value
        again = yaml.safe_load(yaml.safe_dump(config))  # as a ledger stores it
        assert space.encode(again) == vector and space.key(again) == space.key(config)
        i = 0
        for p in space.params:
            if p.kind == "choice":
                part = vector[i : i + len(p.values)]
                assert sum(part) == (1.0 if p.name in config else 0.0) and set(part) <= {0.0, 1.0}
                i += len(p.values)
            else:
                assert (
                    vector[i] == INACTIVE
                    if p.name not in config
                    else 0.0 <= vector[i] <= 1.0 + 1e-12
                )
                i += 1


def test_inactive_numbers_encode_apart_from_every_active_value():
    space = Space([choice("opt", ["adam", "sgd"]), real("m", 0.0, 1.0, when={"opt": "sgd"})])
    assert space.encode({"opt": "adam"}) == [1.0, 0.0, INACTIVE]
    assert space.encode({"opt": "sgd", "m": 0.0}) == [0.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "config, words",
    [
        ({"lr": 0.1, "opt": "adam"}, "lr: 0.1 is outside"),
        ({"lr": 1e-3}, "opt: missing"),
        ({"lr": 1e-3, "opt": "adam", "m": 0.5}, "m: given, but inactive"),
        ({"lr": 1e-3, "opt": "sgd"}, "m: missing"),
        ({"lr": 1e-3, "opt": "nadam"}, "'nadam' is not one of"),
        ({"lr": 1e-3, "opt": "adam", "x": 1}, "'x' is not in the space"),
        ({"lr": True, "opt": "adam"}, "True is not a number"),
        ({"lr": math.nan, "opt": "adam"}, "nan is outside"),
    ],
)
def test_validate_names_the_parameter_and_the_problem(config, words):
    space = Space(
        [
            real("lr", 1e-4, 1e-2, log=True),
            choice("opt", ["adam", "sgd"]),
            real("m", 0.0, 0.9, when={"opt": "sgd"}),
        ]
    )
    with pytest.raises(KitError, match=None) as err:
        space.validate(config)
    assert words in str(err.value), str(err.value)


def test_choice_values_are_typed_true_is_not_1():
    space = Space([choice("c", [1, True, "1"])])
    assert len({space.key({"c": v}) for v in (1, True, "1")}) == 3
    assert len(space.grid(2)) == 3


@pytest.mark.parametrize(
    "params, words",
    [
        ([real("a", 1.0, 1.0)], "low 1.0 must be below high"),
        ([real("a", 0.0, 1.0, log=True)], "log scale needs low > 0"),
        ([choice("a", [])], "at least one value"),
        ([choice("a", [1, 1.0])], "twice"),
        ([real("a", 0, 1, when={"b": "x"}), choice("b", ["x"])], "not an earlier choice"),
        ([choice("b", ["x"]), real("a", 0, 1, when={"b": "y"})], "not among its values"),
        ([real("a", 0, 1), real("a", 0, 2)], "used twice"),
    ],
)
def test_a_malformed_space_is_refused(params, words):
    with pytest.raises(KitError) as err:
        Space(params)
    assert words in str(err.value)


def test_a_grid_past_the_bound_is_refused_not_built():
    space = Space([integer(f"n{i}", 0, 1000) for i in range(6)])
    with pytest.raises(KitError, match="more than 100000 points"):
        space.grid(10)


@pytest.mark.parametrize("kind", ["float", "int"])
def test_a_range_without_its_ends_is_a_problem_not_a_crash(kind):
    for low, high in ((None, 1.0), (0.0, None), (None, None)):
        param = Param("lr", kind, low, high)
        assert param.problem() == f"a {kind} parameter needs low and high"
        with pytest.raises(
            ValueError, match=f"parameter lr: a {kind} parameter needs low and high"
        ):
            param.unit(0.5)
