"""The report's numbers come from the ledger: the running best is the best so far in the order
evaluations ended, the best configuration is the best median over its repeats, failures are rows
without a value. Checked against values computed here, on any ledger hypothesis makes."""

from __future__ import annotations

import csv
import io
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.study import ledger
from kit.study.report import axis_values, best_configs, rows, to_csv

VALUES = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False))


@given(
    st.lists(st.tuples(st.integers(0, 3), VALUES), min_size=1, max_size=12),
    st.sampled_from(["minimize", "maximize"]),
    st.permutations(range(12)),
)
def test_running_best_and_best_config_match_a_direct_computation(
    tmp_path_factory, evals, direction, order
):
    d = tmp_path_factory.mktemp("r")
    ledger.create(d, {"objective": "x", "direction": direction})
    for i, (lr, _) in enumerate(evals, 1):
        ledger.append(d, "proposed", eval=f"e{i:04d}", config={"lr": 10.0**-lr, "opt": "adam"})
    ended = [i for i in order if i < len(evals)]  # evaluations end in another order than proposed
    for i in ended:
        value = evals[i][1]
        if value is None:
            ledger.append(d, "failed", eval=f"e{i + 1:04d}", error="step 0 exited 1\nTraceback ...")
        else:
            ledger.append(d, "finished", eval=f"e{i + 1:04d}", objective=value)
    table = rows(ledger.read(d), direction)
    assert [r.eval_id for r in table] == [f"e{i + 1:04d}" for i in ended]
    better = min if direction == "minimize" else max
    seen = []
    for r, i in zip(table, ended):
        assert r.objective == evals[i][1]
        seen += [evals[i][1]] if evals[i][1] is not None else []
        assert r.running_best == (better(seen) if seen else None)
        assert r.error is None or "\n" not in r.error
    top = best_configs(table, direction)
    by_lr = {}
    for lr, value in evals:
        if value is not None:
            by_lr.setdefault(lr, []).append(value)
    if by_lr:
        want = better(statistics.median(v) for v in by_lr.values())
        assert top[0]["median"] == want
        lr = next(k for k in by_lr if 10.0**-k == top[0]["config"]["lr"])  # a tie: either config
        assert statistics.median(by_lr[lr]) == want
        assert (top[0]["min"], top[0]["max"], top[0]["n"]) == (
            min(by_lr[lr]),
            max(by_lr[lr]),
            len(by_lr[lr]),
        )
    else:
        assert top == []
    parsed = list(csv.DictReader(io.StringIO(to_csv(table, ["lr", "opt"]))))
    assert [p["eval"] for p in parsed] == [r.eval_id for r in table]
    assert [float(p["objective"]) if p["objective"] else None for p in parsed] == [
        r.objective for r in table
    ]


def test_parallel_coordinates_scale_numbers_logs_and_categories_onto_0_1():
    from kit.study.report import Row

    table = [
        Row(i, f"e{i:04d}", "finished", 1.0, 1.0, c, None)
        for i, c in enumerate(
            [
                {"lr": 1e-4, "opt": "sgd", "b": 4},
                {"lr": 1e-2, "opt": "adam", "b": 8},
                {"lr": 1e-3, "opt": "sgd"},
            ],
            1,
        )
    ]
    lr, labels = axis_values(table, "lr", log=True)
    assert labels == ["0.0001", "0.01 (log)"] and lr == pytest.approx(
        [0.0, 1.0, 0.5]
    )  # log: 1e-3 half way
    opt, labels = axis_values(table, "opt")
    assert labels == ["adam", "sgd"] and opt == [1.0, 0.0, 1.0]
    b, labels = axis_values(table, "b")  # a linear parameter: 4 and 8 at the ends
    assert axis_values(table, "lr")[0] == pytest.approx([0.0, 1.0, 0.09090909])
    assert b == [0.0, 1.0, None] and labels == [
        "4",
        "8",
    ]  # inactive in e0003: no point on that axis
