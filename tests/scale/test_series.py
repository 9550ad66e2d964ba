"""What a series means, repeats, and container vs bare, on results files gan3d.results writes with
controlled figures (tests/scale/builders.py): the arithmetic is checked against a direct computation.
The real pair of runs is tests/scale/test_container_pair.py."""

from __future__ import annotations

import json
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.cli import main
from kit.scale import load_results, paper_table, scaling_table, write_report
from kit.scale.overhead import container_overhead
from kit.scale.plan import make_plan
from kit.scale.report import group_series
from kit.scale.rows import flop_unit
from tests.scale.builders import GiB, write_run

KEY_FIELDS = {  # a second value for every field of the series key, as gan3d train would record it
    "site": ("site", "laptop"),
    "ranks_per_node": ("ranks_per_node", 2),
    "threads": ("threads", 24),
    "batch": ("batch", 16),
    "mpi": ("mpi", "MPICH Version: 4.0.2"),
    "preset": ("preset", "tiny"),
    "events": ("events", 512),
    "container": ("container", "charliecloud"),
    "precision": ("precision", "bf16"),
    "digest": ("digest", "sha256:" + "ab" * 32),
}


@given(
    changed=st.sets(st.sampled_from(sorted(KEY_FIELDS)), min_size=1),
    nodes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3),
)
def test_runs_whose_key_fields_differ_are_never_one_series(tmp_path_factory, changed, nodes):
    tmp = tmp_path_factory.mktemp("key")
    other = {KEY_FIELDS[f][0]: KEY_FIELDS[f][1] for f in changed}
    paths = [write_run(tmp / f"a{i}.json", n, 100.0 / n) for i, n in enumerate(nodes)]
    paths += [write_run(tmp / f"b{i}.json", n, 90.0 / n, **other) for i, n in enumerate(nodes)]
    series = group_series(load_results(paths))
    assert len(series) == 2
    for rows in series.values():
        sources = {run.path.name[0] for row in rows for run in row.runs}
        assert len(sources) == 1  # every series holds runs of one kind only
        assert sum(row.repeats for row in rows) == len(nodes)


@given(
    walls=st.lists(st.floats(0.5, 5000, allow_nan=False), min_size=1, max_size=7),
    base=st.floats(0.5, 5000, allow_nan=False),
)
def test_medians_and_ranges_are_those_of_the_repeats(tmp_path_factory, walls, base):
    tmp = tmp_path_factory.mktemp("rep")
    paths = [write_run(tmp / "base.json", 1, base)] + [
        write_run(tmp / f"r{i}.json", 4, w) for i, w in enumerate(walls)
    ]
    [rows] = group_series(load_results(paths)).values()
    row = rows[1]
    # The builder writes [1.3 w, w]: the run's time is its second epoch, re-read from JSON.
    assert row.seconds_per_epoch == pytest.approx(statistics.median(walls), rel=1e-12)
    assert (row.seconds_min, row.seconds_max) == pytest.approx((min(walls), max(walls)), rel=1e-12)
    assert row.linear_seconds == pytest.approx(base / 4, rel=1e-12)
    assert row.efficiency_percent == pytest.approx(
        100 * base / 4 / statistics.median(walls), rel=1e-12
    )
    assert row.data_stall_percent == pytest.approx(
        10.0, rel=1e-9
    )  # the builder's steps: 90% of the wall


def test_container_vs_bare_overhead_and_memory(tmp_path):
    digest = "sha256:" + "cd" * 32
    bare = [
        write_run(tmp_path / f"bare-{n}-{i}.json", n, t, rss=3 * GiB, available=60 * GiB)
        for n, times in ((4, (100.0, 104.0, 98.0)), (8, (52.0,)))
        for i, t in enumerate(times)
    ]
    inside = [
        write_run(
            tmp_path / f"ct-{n}-{i}.json",
            n,
            t,
            container="charliecloud",
            digest=digest,
            rss=int(3.1 * GiB),
            available=59 * GiB,
        )
        for n, times in ((4, (101.0, 103.0)), (8, (53.0,)), (16, (27.0,)))
        for i, t in enumerate(times)
    ]
    series = group_series(load_results(bare + inside))
    assert len(series) == 2
    four, eight = container_overhead(series)  # 16 nodes ran only in the container: no pair
    assert (four.nodes, eight.nodes) == (4, 8)
    assert four.percent == pytest.approx(100 * (102.0 - 100.0) / 100.0)
    assert four.percent_range == pytest.approx((100 * (101 - 104) / 104, 100 * (103 - 98) / 98))
    assert eight.percent == pytest.approx(100 * (53 - 52) / 52)
    assert four.peak_rss_bytes() == (int(3.1 * GiB), 3 * GiB)
    assert four.memory_available_bytes() == (59 * GiB, 60 * GiB)

    out = tmp_path / "out"
    write_report(load_results(bare + inside), out, reference="table9")
    md = (out / "report.md").read_text()
    row = next(
        line
        for line in md.splitlines()
        if line.startswith("| `supermuc-ng/4x12/") and "| 4 |" in line
    )
    assert "| 102.00 [101.00–103.00] | 100.00 [98.00–104.00] | +2.0% [-2.9–+5.1] | 2/3 |" in row
    assert "| 3.33 / 3.22 | 63.35 / 64.42 |" in row  # GB (1e9 bytes)
    assert "| AlexNet with cifar | 331.29 | 331.33 | +0.01% |" in md  # Table 9: 1 - with/without
    assert "TensorFlow version 1.9" in md  # the paper's own 1.9 vs 1.11, noted
    assert (out / "container_overhead.png").read_bytes().startswith(b"\x89PNG")


def test_old_results_without_the_new_fields_still_load(tmp_path):
    new = (
        "container",
        "memory_available_bytes_min_per_rank",
        "epoch_wall_times",
        "preset",
        "train_events",
    )
    old = write_run(tmp_path / "old.json", 4, 100.0, digest="sha256:" + "ef" * 32)
    bare = write_run(tmp_path / "old-bare.json", 4, 100.0)
    for path in (old, bare):
        record = json.loads(path.read_text())
        path.write_text(json.dumps({k: v for k, v in record.items() if k not in new}))
    inside, outside = load_results([old, bare])
    assert (inside.container, inside.container_from) == (
        "charliecloud",
        "inferred from image_digest",
    )
    assert (outside.container, outside.precision, outside.preset, outside.events_per_epoch) == (
        None,
        "fp32",
        None,
        None,
    )
    assert inside.epoch_seconds == pytest.approx(95.0) and inside.epoch_seconds_from.startswith(
        "epoch_times"
    )
    assert inside.memory_available_bytes is None and inside.peak_rss_bytes == 3 * GiB
    write_report([inside, outside], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert (
        "2 result(s) predate the `container` field" in md
        and "Preset not recorded, epoch size not recorded" in md
    )


def test_a_tiny_series_is_not_compared_with_the_papers_times(tmp_path):
    paths = [
        write_run(tmp_path / f"{n}.json", n, 10.0 / n, preset="tiny", events=512) for n in (1, 2)
    ]
    write_report(load_results(paths), tmp_path / "out", reference="table1")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Preset tiny, epoch of 512 events" in md
    assert (
        "Times not compared with the paper's (epoch of 180,000 showers, full model): "
        "`supermuc-ng/4x12/b8/intel/tiny/512ev/bare/fp32`" in md
    )


def test_flop_unit_follows_the_magnitude():
    assert flop_unit(2.08e15) == ("PFLOP/s", 1e15)
    assert flop_unit(9.9e14) == ("TFLOP/s", 1e12)
    assert flop_unit(6.8e9) == ("GFLOP/s", 1e9)


def test_plan_repeats_each_run(tmp_path, capsys):
    plan = make_plan("supermuc-ng", [4, 8], [4], threads=None, walltime="02:00:00", repeats=3)
    assert [r.run_id for r in plan.runs][:4] == [
        "n4-r4-t12-x1",
        "n4-r4-t12-x2",
        "n4-r4-t12-x3",
        "n8-r4-t12-x1",
    ]
    assert len(plan.runs) == 6
    with pytest.raises(SystemExit) as usage:  # the bounded number type: a usage error
        main(
            [
                "scale",
                "plan",
                "--site",
                "supermuc-ng",
                "--no-container",
                "--nodes",
                "4",
                "--ranks-per-node",
                "4",
                "--repeats",
                "0",
                "--dir",
                str(tmp_path / "s"),
            ]
        )
    assert usage.value.code == 2
    assert "give a number from 1 to 100" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    assert paper_table("8").overhead_percent() == pytest.approx(
        (100 * (1973 / 1968 - 1), 100 * (74 / 75 - 1))
    )


def test_a_percentage_of_peak_without_its_peak_named_is_reported(tmp_path):
    """A results file may state % of peak with a null denominator: the row says its peak is
    unnamed (beside the named one of another repeat) instead of the report failing."""
    paths = [
        write_run(tmp_path / "a.json", 2, 50.0, percent_of_peak=40.0),
        write_run(
            tmp_path / "b.json", 2, 52.0, percent_of_peak=42.0, percent_of_peak_denominator=None
        ),
    ]
    runs = load_results(paths)
    named = runs[0].percent_of_peak_denominator
    assert named and runs[1].percent_of_peak_denominator is None
    (row,) = scaling_table(runs)
    assert row.percent_of_peak == 41.0
    assert row.percent_of_peak_denominator == f"{named} / an unnamed peak"
    write_report(runs, tmp_path / "out")
    assert "an unnamed peak" in (tmp_path / "out" / "report.md").read_text()
