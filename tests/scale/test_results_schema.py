"""A results file's nested parts (loss history, rank 0's step losses, physics, epoch clocks, the
fabric and Horovod settings) are checked by kit.schema's RESULTS section: every bad value is named
by its key path, all of them in one line, and any JSON in their place is a RunResult or that line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gan3d.steplosses import StepLosses
from kit.errors import KitError
from kit.scale.runs import RunResult, load_results
from tests.scale.builders import write_run

PHYSICS = {  # the keys gan3d validate adds (gan3d.validate.scaled_score), plus its per-bin detail
    "score": 0.8,
    "score_null_reason": None,
    "score_meaning": "1 = held-out data, 0 = empty showers",
    "score_raw": 2.0,
    "score_reference_data": 1.0,
    "score_reference_empty": 6.0,
    "bins": [{"range_gev": [10, 100], "score": 0.8}],
}


def _full_run(path: Path) -> Path:
    """A run whose record holds every nested part as gan3d's writers make it."""
    logged = StepLosses()
    for g in range(4):
        logged.add(g, 1 + g // 2, 1 + g % 2, losses={"d_loss": 1.0 + g, "g_loss": 3.0 - g / 2})
    history = [
        {
            "epoch": e,
            "train": {"d_loss": 1.5 / e, "g_loss": 4.0 / e, "gen_aux": 0.1},
            "validation": {"d_loss": 1.6 / e, "g_loss": 4.2 / e},
            "learning_rate": {"first_step": 1e-3, "last_step": 1e-3},
        }
        for e in (1, 2)
    ]
    return write_run(
        path,
        1,
        10.0,
        steps=2,
        losses=history,
        step_losses=logged.record(),
        physics=PHYSICS,
        env={"FI_PROVIDER": "tcp", "HOROVOD_CYCLE_TIME": "0.5"},
    )


def _edit(path: Path, *changes: tuple[tuple[Any, ...], Any]) -> Path:
    record = json.loads(path.read_text())
    for where, value in changes:
        parent = record
        for key in where[:-1]:
            parent = parent[key]
        parent[where[-1]] = value
    path.write_text(json.dumps(record))
    return path


def test_a_record_as_gan3d_writes_it_is_read_whole(tmp_path):
    [run] = load_results([_full_run(tmp_path / "r.json")])
    assert [(c.kind, c.name, c.epochs) for c in run.losses] == [
        ("train", "d_loss", (1, 2)),
        ("train", "g_loss", (1, 2)),
        ("validation", "d_loss", (1, 2)),
        ("validation", "g_loss", (1, 2)),
    ]
    assert [c.epochs for c in run.step_losses] == [(0.5, 1.0, 1.5, 2.0)] * 2
    assert run.step_losses[0].values == (1.0, 2.0, 3.0, 4.0)
    assert (run.physics.score, run.physics.score_raw, run.physics.score_reference_empty) == (
        0.8,
        2.0,
        6.0,
    )
    assert run.mpi_fabric == (("FI_PROVIDER", "tcp"),)
    assert run.horovod_settings == (("HOROVOD_CYCLE_TIME", "0.5"),)


def test_several_bad_nested_values_are_all_named_in_one_line(tmp_path):
    path = _edit(
        _full_run(tmp_path / "r.json"),
        (("losses", 1, "train", "g_loss"), "high"),
        (("step_losses", "points", 2), [4, 2, 1, 1.0]),
        (("physics", "score_raw"), [1]),
        (("epoch_wall_times", 0), -3),
        (("mpi_fabric", "FI_PROVIDER"), 5),
    )
    with pytest.raises(KitError) as exc:
        load_results([path])
    line = str(exc.value)
    assert (
        line.startswith(f"{path}: invalid gan3d results file (5 problem(s)): ") and "\n" not in line
    )
    for named in (
        f"{path}: losses[1].train.g_loss: expected a number, got str 'high'",
        f"{path}: step_losses.points[2]: [4, 2, 1, 1.0] is not a row of global_step, epoch",
        f"{path}: physics.score_raw: expected a number or null, got list [1]",
        f"{path}: epoch_wall_times[0]: must be at least 1e-06, got -3",
        f"{path}: mpi_fabric.FI_PROVIDER: expected a string or null, got int 5",
    ):
        assert named in line
    assert line.endswith("; fix: re-run the job with the current gan3d, or leave this file out")


@pytest.mark.parametrize(
    "where, value, named",
    [
        (("losses", 0, "epoch"), 0, "losses[0].epoch: must be at least 1, got 0"),
        (("losses", 0, "validation"), [], "losses[0].validation: expected a mapping"),
        (("step_losses", "columns"), ["epoch"], "step_losses.columns: ['epoch'] is not"),
        (("step_losses", "points", 0, 2), 3, "step_losses: a step is past steps_per_epoch (2)"),
        (("physics", "score_null_reason"), "a\nb", r"physics.score_null_reason: 'a\nb' contains"),
        (("horovod_settings",), {"": "1"}, "horovod_settings.'': '' is not 1 to 200 characters"),
    ],
)
def test_one_bad_nested_value_is_named_by_its_key_path(tmp_path, where, value, named):
    path = _edit(_full_run(tmp_path / "r.json"), (where, value))
    with pytest.raises(KitError) as exc:
        load_results([path])
    assert str(exc.value).startswith(f"{path}: {named}") and "; fix: " in str(exc.value)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
NESTED = [
    ("losses",),
    ("losses", 0),
    ("losses", 1, "train"),
    ("losses", 1, "validation", "d_loss"),
    ("step_losses",),
    ("step_losses", "points"),
    ("step_losses", "points", 3),
    ("step_losses", "points", 0, 1),
    ("physics",),
    ("physics", "score"),
    ("physics", "score_null_reason"),
    ("epoch_wall_times",),
    ("epoch_step_seconds", 1),
    ("full_epoch_seconds_estimate",),
    ("mpi_fabric",),
    ("horovod_settings", "HOROVOD_CYCLE_TIME"),
]


_ABSENT = object()


def _child(parent: Any, key: Any) -> Any:
    if isinstance(parent, dict) and key in parent:
        return parent[key]
    if isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        return parent[key]
    return _ABSENT


@pytest.fixture(scope="module")
def full_record(tmp_path_factory) -> str:
    return _full_run(tmp_path_factory.mktemp("r") / "r.json").read_text()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(changes=st.lists(st.tuples(st.sampled_from(NESTED), JSON), min_size=1, max_size=3))
def test_any_json_in_the_nested_parts_is_a_run_or_one_line(tmp_path, full_record, changes):
    path = tmp_path / "r.json"
    path.write_text(full_record)
    record = json.loads(full_record)
    for where, value in changes:  # a path an earlier change took away is left as it is
        parent = record
        for key in where[:-1]:
            parent = _child(parent, key)
        if _child(parent, where[-1]) is not _ABSENT:
            parent[where[-1]] = value
    path.write_text(json.dumps(record))
    try:
        [run] = load_results([path])
    except KitError as exc:
        assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc) and "; fix: " in str(exc)
        return
    assert isinstance(run, RunResult) and run.epoch_seconds >= 1e-6
    for curve in (*run.losses, *run.step_losses):
        assert len(curve.epochs) == len(curve.values)
        assert all(isinstance(v, float) and abs(v) <= 1e24 for v in curve.values)
