"""The study ledger: what a driver records is what the next driver reads back, a torn last line
(a driver killed inside a write) is ignored and cut, and anything else that is not a record the kit
wrote is refused in one line naming the file and line, with bounded work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.errors import KitError
from kit.study import ledger


def _study(tmp_path: Path) -> Path:
    d = tmp_path / "s"
    d.mkdir()
    ledger.create(
        d,
        {
            "site": "/x/laptop.yaml",
            "parallel": 2,
            "objective": "showers_per_second",
            "direction": "maximize",
        },
    )
    return d


def test_records_fold_into_each_evaluations_state_in_order(tmp_path):
    d = _study(tmp_path)
    ledger.append(d, "started")
    for i, eid in enumerate(["e0001", "e0002", "e0003"]):
        ledger.append(
            d, "proposed", eval=eid, config={"lr": 10.0**-i, "optimizer": "adam", "flag": True}
        )
        ledger.append(d, "submitted", eval=eid, how="slurm", job=str(100 + i))
    ledger.append(d, "finished", eval="e0002", objective=2.5, result="/r/e0002.json")
    ledger.append(d, "failed", eval="e0001", error="step 0 exited 1\nlog tail")
    led = ledger.read(d)
    assert led.header["parallel"] == 2 and len(led.started) == 1
    assert [(e.eval_id, e.state) for e in led.evaluations.values()] == [
        ("e0001", "failed"),
        ("e0002", "finished"),
        ("e0003", "submitted"),
    ]
    assert (
        led.evaluations["e0002"].objective == 2.5 and led.evaluations["e0001"].config["lr"] == 1.0
    )
    assert [e.eval_id for e in led.done()] == ["e0001", "e0002"] and [
        e.eval_id for e in led.in_flight()
    ] == ["e0003"]
    assert led.end_order["e0002"] < led.end_order["e0001"]  # the order they ended, not proposed
    assert led.evaluations["e0003"].submissions[0]["job"] == "102" and led.next_id() == "e0004"
    ledger.append(d, "cancelled", eval="e0003")
    assert ledger.read(d).evaluations["e0003"].state == "cancelled"


def test_a_second_plan_never_overwrites_a_ledger(tmp_path):
    d = _study(tmp_path)
    before = (d / ledger.NAME).read_bytes()
    with pytest.raises(
        KitError, match="exists: this directory holds a study already; fix: kit study run"
    ):
        ledger.create(d, {"site": "other"})
    assert (d / ledger.NAME).read_bytes() == before


def test_a_torn_last_line_is_ignored_then_cut_by_the_next_append(tmp_path):
    d = _study(tmp_path)
    ledger.append(d, "proposed", eval="e0001", config={"lr": 0.1})
    with open(d / ledger.NAME, "ab") as fh:
        fh.write(b'{"event":"finished","eval":"e0001","objec')  # killed inside a write
    assert ledger.read(d).evaluations["e0001"].state == "proposed"
    ledger.append(d, "failed", eval="e0001", error="x")
    lines = (d / ledger.NAME).read_bytes().splitlines()
    assert all(json.loads(line) for line in lines) and len(lines) == 3
    assert ledger.read(d).evaluations["e0001"].state == "failed"


@pytest.mark.parametrize(
    "line, message",
    [
        (
            b'{"event":"finished","eval":"e0001","objective":1}',
            "finished record before it was proposed",
        ),
        (
            b'{"event":"proposed","eval":"../../etc","config":{}}',
            "eval: '../../etc' is not an id like e0001",
        ),
        (b'{"event":"proposed","eval":"e0001","config":{"a":{"b":1}}}', "not a flat mapping"),
        (b'{"event":"rm -rf","eval":"e0001"}', "event: 'rm -rf' is not allowed"),
        (b'[1,2]', "an array, not a ledger record (an object)"),
        (b'{"event":"proposed","eval":"e0001","config":{"lr":NaN}}', "not a JSON record"),
        (b"[" * 5000 + b"]" * 5000, "nested deeper than 6"),
        (b'{"event":"started","t":"' + b"x" * ledger.MAX_LINE + b'"}', "a line of 65"),
        (b"\xff\xfe", "not a JSON record"),
    ],
)
def test_hostile_lines_are_refused_in_one_line_naming_file_and_line(tmp_path, line, message):
    d = _study(tmp_path)
    with open(d / ledger.NAME, "ab") as fh:
        fh.write(line + b"\n")
    with pytest.raises(KitError) as err:
        ledger.read(d)
    text = str(err.value)
    assert (
        message in text and f"{d / ledger.NAME}:2:" in text and "\n" not in text and "fix:" in text
    )


def test_no_evaluation_is_counted_twice(tmp_path):
    d = _study(tmp_path)
    ledger.append(d, "proposed", eval="e0001", config={})
    ledger.append(d, "finished", eval="e0001", objective=1.0)
    ledger.append(d, "finished", eval="e0001", objective=2.0)
    with pytest.raises(
        KitError,
        match=r"ledger.jsonl:4: e0001 has a finished record after it finished: "
        r"no evaluation is counted twice",
    ):
        ledger.read(d)


def test_a_ledger_bigger_than_the_bound_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    d = _study(tmp_path)
    monkeypatch.setattr(ledger, "MAX_BYTES", 300)
    ledger.append(d, "proposed", eval="e0001", config={"x": "y" * 50})
    with pytest.raises(KitError, match="would pass"):
        ledger.append(d, "proposed", eval="e0002", config={"x": "y" * 200})
    with open(d / ledger.NAME, "ab") as fh:
        fh.write(b" " * 400 + b"\n")
    with pytest.raises(KitError, match="ledger"):
        ledger.read(d)


@given(st.lists(st.binary(max_size=120), min_size=1, max_size=6))
def test_any_bytes_after_the_header_read_back_or_are_one_clean_line(tmp_path_factory, lines):
    d = _study(tmp_path_factory.mktemp("h"))
    with open(d / ledger.NAME, "ab") as fh:
        fh.write(b"\n".join(lines) + b"\n")
    try:
        led = ledger.read(d)
    except KitError as exc:
        assert "\n" not in str(exc) and str(d / ledger.NAME) in str(exc)
    else:
        assert all(ledger.EVAL_RE.fullmatch(e) for e in led.evaluations)


@given(
    st.lists(
        st.dictionaries(
            st.from_regex(r"[a-z][a-z-]{0,10}", fullmatch=True),
            st.one_of(
                st.booleans(),
                st.integers(-(10**6), 10**6),
                st.text(max_size=20),
                st.floats(-ledger.MAX_VALUE, ledger.MAX_VALUE),
            ),
            max_size=5,
        ),
        max_size=8,
    )
)
def test_configs_written_are_read_back_equal(tmp_path_factory, configs):
    d = _study(tmp_path_factory.mktemp("c"))
    for i, config in enumerate(configs, 1):
        ledger.append(d, "proposed", eval=f"e{i:04d}", config=config)
    assert [e.config for e in ledger.read(d).evaluations.values()] == configs


@pytest.mark.parametrize(
    "header, message",
    [
        ({"parallel": 10**9}, ":1: parallel: must be at most 1000, got 1000000000"),
        (
            {"direction": "maximise"},
            ":1: direction: 'maximise' is not allowed; did you mean 'maximize'?",
        ),
        ({"walltime": "1h"}, ":1: walltime: '1h' is not HH:MM:SS"),
    ],
)
def test_a_header_edited_out_of_bounds_is_named_by_key_with_the_fix(tmp_path, header, message):
    d = tmp_path / "s"
    d.mkdir()
    ledger.create(d, {"site": "/x.yaml", "site_name": "x", "parallel": 2, **header})
    with pytest.raises(KitError) as err:
        ledger.read(d)
    text = str(err.value)
    assert f"{d / ledger.NAME}{message}" in text and "; fix: restore the ledger.jsonl" in text
