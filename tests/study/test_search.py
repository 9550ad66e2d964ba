"""The searchers: never a config already evaluated or in flight, never one twice, deterministic for a
seed and a history; grid in order then spent; mbo finds better points than its own random design
and than random search on a cheap function (the benchmark, bench/study_search.py, measures how much)."""

from __future__ import annotations

import dataclasses
import math
import statistics
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.study.search import Observation, make_searcher
from kit.study.space import Space, choice, integer, real
from kit.study.spec import Budget, Objective, Strategy, StudySpec

SPACE = Space(
    [
        real("x", -5.0, 10.0),
        real("y", 0.0, 15.0),
        choice("c", ["a", "b", "c"]),
        integer("k", 1, 4),
        real("m", 1e-3, 1.0, log=True, when={"c": ["b"]}),
    ]
)
SMALL = Space([choice("c", ["a", "b"]), integer("k", 1, 3)])  # 6 configs: spent quickly


def spec(kind: str, space: Space = SPACE, seed: int = 0, **settings) -> StudySpec:
    return StudySpec(
        "test",
        space,
        {},
        Objective("validation.loss", "minimize"),
        Budget(evaluations=40),
        Strategy(kind, **settings),
        seed,
    )


def branin(config: dict) -> float:
    """Branin (minimum 0.397887) plus a penalty per category: a mixed space with a known optimum."""
    x, y = config["x"], config["y"]
    value = (
        (y - 5.1 / (4 * math.pi**2) * x**2 + 5 / math.pi * x - 6) ** 2
        + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x)
        + 10
    )
    return value + {"a": 0.0, "b": 5.0, "c": 20.0}[config["c"]] + (config["k"] - 2) ** 2


def run(searcher, f, evaluations: int, q: int, fail=lambda c: False) -> list[Observation]:
    history: list[Observation] = []
    while len(history) < evaluations:
        batch = searcher.ask(history, [], min(q, evaluations - len(history)))
        if not batch:
            break
        history += [Observation(c, None if fail(c) else f(c)) for c in batch]
    return history


@pytest.mark.parametrize("kind", ["grid", "random", "mbo"])
@given(data=st.data())
def test_never_proposes_what_was_evaluated_or_is_in_flight_nor_twice(kind, data):
    space = data.draw(st.sampled_from([SPACE, SMALL]))
    searcher = make_searcher(
        spec(
            kind,
            space,
            seed=data.draw(st.integers(0, 99)),
            points=2,
            trees=10,
            candidates=50,
            local=20,
            initial=3,
        )
    )
    history: list[Observation] = []
    pending: list[dict] = []
    for _ in range(data.draw(st.integers(1, 6))):
        q = data.draw(st.integers(0, 5))
        batch = searcher.ask(history, pending, q)
        assert len(batch) <= q
        keys = [space.key(c) for c in batch]
        old = {space.key(o.config) for o in history} | {space.key(c) for c in pending}
        assert len(set(keys)) == len(keys) and not set(keys) & old
        for c in batch:
            space.validate(c)
        pending += batch
        finished = data.draw(st.integers(0, len(pending)))
        history += [
            Observation(c, data.draw(st.one_of(st.none(), st.floats(-1e6, 1e6), st.just(math.inf))))
            for c in pending[:finished]
        ]
        pending = pending[finished:]


@pytest.mark.parametrize("kind", ["grid", "random", "mbo"])
def test_the_same_seed_and_history_give_the_same_proposals(kind):
    history = run(make_searcher(spec(kind, seed=5, trees=20)), branin, 12, 4)
    pending = [history.pop().config for _ in range(2)]
    first = make_searcher(spec(kind, seed=5, trees=20)).ask(history, pending, 4)
    again = make_searcher(spec(kind, seed=5, trees=20)).ask(history, pending, 4)
    assert first == again and len(first) == 4
    if kind != "grid":
        assert make_searcher(spec(kind, seed=6, trees=20)).ask(history, pending, 4) != first


def test_random_proposals_do_not_depend_on_how_they_were_asked_for():
    """The i-th config of a study is the same whether asked one by one or four at a time: a resumed
    or differently parallel study proposes what it would have."""
    searcher = make_searcher(spec("random", seed=2))
    one_by_one = run(searcher, branin, 8, 1)
    batched = run(searcher, branin, 8, 4)
    assert [o.config for o in one_by_one] == [o.config for o in batched]


def test_grid_yields_its_points_in_order_then_stops():
    searcher = make_searcher(spec("grid", SMALL))
    assert searcher.size == 6
    first = searcher.ask([], [], 4)
    assert first == SMALL.grid(3)[:4]
    history = [Observation(c, 1.0) for c in first[:3]]
    rest = searcher.ask(history, [first[3]], 10)
    assert rest == SMALL.grid(3)[4:]
    assert searcher.ask(history + [Observation(c, None) for c in [first[3], *rest]], [], 3) == []


def test_random_on_a_spent_finite_space_returns_fewer_then_none():
    searcher = make_searcher(spec("random", SMALL))
    history = run(searcher, lambda c: 0.0, 100, 4)
    assert len(history) == 6 and len({SMALL.key(o.config) for o in history}) == 6
    assert searcher.ask(history, [], 2) == []


def test_mbo_imputes_a_failed_evaluation_as_the_worst_value_seen():
    """A failed evaluation (None) or a non-finite value counts as the worst value seen."""
    searcher = make_searcher(spec("mbo"))
    configs = SPACE.grid(2)[:4]
    history = [
        Observation(configs[0], 3.0),
        Observation(configs[1], None),
        Observation(configs[2], 7.0),
        Observation(configs[3], math.nan),
    ]
    _, losses = searcher._losses(history)
    assert sorted(losses) == [3.0, 7.0, 7.0, 7.0]
    maximise = make_searcher(
        dataclasses.replace(spec("mbo"), objective=Objective("physics_score", "maximize"))
    )
    _, losses = maximise._losses(history)
    assert sorted(losses) == [
        -7.0,
        -3.0,
        -3.0,
        -3.0,
    ]  # the worst of a maximised score is its lowest


def test_mbo_starts_with_the_random_design_then_uses_the_surrogate():
    mbo, rnd = make_searcher(spec("mbo", initial=8)), make_searcher(spec("random"))
    history = run(mbo, branin, 8, 4)
    assert [o.config for o in history] == [o.config for o in run(rnd, branin, 8, 4)]
    assert mbo.ask(history, [], 4) != rnd.ask(history, [], 4)


def test_mbo_improves_on_its_initial_design_and_beats_random_search():
    """Branin over a mixed space, 32 evaluations with 4 in flight, 5 seeds: the surrogate's points
    improve on the best of the random initial design on at least 4 seeds, and mbo's median best is
    below random search's at the same budget (the same initial design: random's first 8 points)."""
    mbo_best, random_best, improved = [], [], 0
    for seed in range(5):
        history = run(make_searcher(spec("mbo", seed=seed, initial=8, trees=50)), branin, 32, 4)
        initial = min(o.value for o in history[:8])
        mbo_best.append(min(o.value for o in history))
        improved += mbo_best[-1] < initial
        random_best.append(
            min(o.value for o in run(make_searcher(spec("random", seed=seed)), branin, 32, 4))
        )
    assert improved >= 4, (mbo_best, random_best)
    assert statistics.median(mbo_best) < statistics.median(random_best), (mbo_best, random_best)


def test_mbo_predicts_in_the_objectives_own_direction():
    """The report sets predictions beside observed values: a maximised score comes back positive."""
    maximise = dataclasses.replace(
        spec("mbo", trees=20), objective=Objective("physics_score", "maximize")
    )
    searcher = make_searcher(maximise)
    history = run(searcher, lambda c: 100.0 - branin(c), 16, 4)
    predicted = searcher.predict(history, [o.config for o in history])
    assert len(predicted) == 16 and all(sd >= 0 for _, sd in predicted)
    observed = [o.value for o in history]
    errors = [abs(m - v) for (m, _), v in zip(predicted, observed)]
    assert statistics.median(errors) < statistics.pstdev(observed)


def test_mbo_without_scikit_learn_names_the_study_extra_in_one_line(tmp_path):
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "from tests.study.test_search import spec\n"
        "from kit.study.search import make_searcher\n"
        "from kit.errors import KitError\n"
        "try:\n    make_searcher(spec('mbo'))\nexcept KitError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.count("\n") == 1 and "pip install 'secure-site-kit[study]'" in done.stdout, (
        done.stdout
    )
    assert "sklearn" in done.stdout


def test_grid_and_random_need_no_numpy():
    """Only mbo needs numpy and scikit-learn: the grid and random searchers run without them."""
    code = (
        "import sys; sys.modules['numpy'] = None; sys.modules['sklearn'] = None\n"
        "from tests.study.test_search import spec, run, SPACE\n"
        "from kit.study.search import make_searcher\n"
        "for k in ('grid', 'random'): print(len(run(make_searcher(spec(k)), lambda c: 1.0, 5, 2)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "5\n5\n", done.stderr[-2000:]
