"""Loss curves, the sweep's loss overlay, showers/s vs nodes and the physics column, on results files
gan3d.results writes with controlled figures (tests/scale/builders.py: a multi-node sweep cannot run
here). The plotted data is read back from the matplotlib Axes and checked against the files."""

from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.errors import KitError
from kit.scale import load_results, write_report
from kit.scale.curves import (
    loss_figure,
    loss_overlay,
    overlay_figure,
    physics,
    physics_figure,
    run_names,
    throughput,
    throughput_figure,
)
from kit.scale.report import group_series
from kit.scale.runs import Validation
from tests.scale.builders import write_run

LOSS = st.floats(-50, 50, allow_nan=False, allow_infinity=False)


def history(
    train: list[tuple[float, float]], validation: list[tuple[float, float]] | None = None
) -> list[dict]:
    """gan3d train's `losses`: per epoch the train and validation means (d_loss, g_loss and a
    part).
    """
    validation = validation or train
    return [
        {
            "epoch": i + 1,
            "train": {"d_loss": d, "g_loss": g, "d_real_loss": 0.5},
            "validation": {"d_loss": vd, "g_loss": vg},
            "learning_rate": {"first_step": 1e-3, "last_step": 1e-3},
        }
        for i, ((d, g), (vd, vg)) in enumerate(zip(train, validation))
    ]


@settings(max_examples=25, deadline=None)
@given(
    repeats=st.dictionaries(
        st.sampled_from([1, 2, 4]),
        st.lists(st.lists(st.tuples(LOSS, LOSS), min_size=1, max_size=5), min_size=1, max_size=3),
        min_size=1,
    )
)
def test_overlay_is_the_median_and_range_of_the_repeats_per_epoch(tmp_path_factory, repeats):
    tmp = tmp_path_factory.mktemp("overlay")
    paths = [
        write_run(tmp / f"n{n}-x{i}.json", n, 100.0 / n, losses=history(h))
        for n, runs in repeats.items()
        for i, h in enumerate(runs)
    ]
    [(key, rows)] = group_series(load_results(paths)).items()
    for name, column in (("d_loss", 0), ("g_loss", 1)):
        bands = loss_overlay(rows, "train", name)
        assert [b.label for b in bands] == [
            f"{n} node{'s' if n > 1 else ''}, global batch {8 * 4 * n}" for n in sorted(repeats)
        ]
        for band, n in zip(bands, sorted(repeats)):
            epochs = max(len(h) for h in repeats[n])
            assert band.x == tuple(range(1, epochs + 1))
            for e in range(epochs):
                values = [h[e][column] for h in repeats[n] if len(h) > e]
                assert band.median[e] == pytest.approx(statistics.median(values), abs=1e-12)
                assert (band.low[e], band.high[e]) == (min(values), max(values))
    fig = overlay_figure({key: rows})
    d_axis, g_axis = fig.axes
    solid = [line for line in g_axis.lines if line.get_linestyle() == "-"]
    assert [tuple(line.get_ydata()) for line in solid] == [
        b.median for b in loss_overlay(rows, "train", "g_loss")
    ]
    assert [line.get_label() for line in solid] == [
        b.label for b in loss_overlay(rows, "train", "g_loss")
    ]


def test_a_runs_loss_plot_draws_its_recorded_losses(tmp_path):
    train, val = [(1.5, 4.0), (1.2, 3.1), (0.9, 2.7)], [(1.6, 4.2), (1.4, 3.3), (1.1, 2.9)]
    [run] = load_results([write_run(tmp_path / "a.json", 1, 10.0, losses=history(train, val))])
    fig = loss_figure(run, "a")
    for ax, column in zip(fig.axes, (0, 1)):
        lines = {line.get_label(): line for line in ax.lines}
        assert tuple(lines["train"].get_xdata()) == (1, 2, 3)
        assert tuple(lines["train"].get_ydata()) == tuple(t[column] for t in train)
        assert tuple(lines["validation"].get_ydata()) == tuple(v[column] for v in val)
        assert "loss" in ax.get_ylabel() and ax.get_xlabel() == "epoch"


def test_a_runs_loss_plot_draws_rank_0s_logged_steps_under_the_epoch_means(tmp_path):
    """step_losses rows (global_step, epoch, step, d, g) land at epoch - 1 + step /
    steps_per_epoch.
    """
    train, val = [(1.5, 4.0), (1.2, 3.1)], [(1.6, 4.2), (1.4, 3.3)]
    rows = [[0, 1, 1, 1.7, 4.5], [2, 1, 3, 1.4, 3.9], [4, 2, 1, 1.3, 3.2], [6, 2, 3, 1.1, 3.0]]
    path = write_run(
        tmp_path / "a.json",
        1,
        10.0,
        steps=4,
        losses=history(train, val),
        step_losses={
            "stride": 2,
            "columns": ["global_step", "epoch", "step", "d_loss", "g_loss"],
            "points": rows,
        },
    )
    [run] = load_results([path])
    for ax, column in zip(loss_figure(run, "a").axes, (3, 4)):
        line = {line.get_label(): line for line in ax.lines}["train, rank 0 per step"]
        assert tuple(line.get_xdata()) == (0.25, 0.75, 1.25, 1.75)
        assert tuple(line.get_ydata()) == tuple(r[column] for r in rows)


@pytest.mark.parametrize(
    "points",
    [
        [[0, 1, 5, 1.0, 2.0]],  # step 5 of a 4-step epoch
        [[0, 0, 1, 1.0, 2.0]],
        [[0, 1, 1, 1.0]],
        [[0, 1, 1, 1.0, 1e400]],
        "rows",
        [[0, 1, 1, 1.0, 2.0]] * 5000,
    ],
)
def test_bad_step_losses_are_one_line_naming_the_file_and_key(tmp_path, points):
    path = write_run(tmp_path / "r.json", 1, 10.0, steps=4)
    record = json.loads(path.read_text())
    record["step_losses"] = {
        "stride": 1,
        "columns": ["global_step", "epoch", "step", "d_loss", "g_loss"],
        "points": points,
    }
    path.write_text(json.dumps(record))
    with pytest.raises(KitError) as exc:
        load_results([path])
    assert str(exc.value).startswith(f"{path}: step_losses") and "\n" not in str(exc.value)


@settings(max_examples=25, deadline=None)
@given(
    rates=st.dictionaries(
        st.sampled_from([1, 2, 4, 8]),
        st.lists(st.floats(0.5, 5000), min_size=1, max_size=3),
        min_size=1,
    )
)
def test_showers_per_second_and_ideal_scaling(tmp_path_factory, rates):
    tmp = tmp_path_factory.mktemp("tp")
    # write_run's showers/s is 8 x 4n showers per step over steps of 0.9 x wall / steps: pick the wall
    paths = []
    for n, values in rates.items():
        for i, rate in enumerate(values):
            steps = max(1, 180_000 // (8 * 4 * n))
            wall = 8 * 4 * n * steps / (0.9 * rate)
            paths.append(write_run(tmp / f"{n}-{i}.json", n, wall))
    series = group_series(load_results(paths))
    [rows] = series.values()
    measured, ideal = throughput(rows)
    nodes = sorted(rates)
    assert measured.x == tuple(nodes)
    assert measured.median == pytest.approx([statistics.median(rates[n]) for n in nodes], rel=1e-9)
    assert measured.low == pytest.approx([min(rates[n]) for n in nodes], rel=1e-9)
    assert ideal.median == pytest.approx(
        [statistics.median(rates[nodes[0]]) * n / nodes[0] for n in nodes], rel=1e-9
    )
    ax = throughput_figure(series).axes[0]
    drawn = {line.get_label(): tuple(line.get_ydata()) for line in ax.lines}
    assert any(v == pytest.approx(ideal.median) for k, v in drawn.items() if k.endswith(" ideal"))
    assert [int(t) for t in ax.get_xticks()] == nodes  # integer node ticks: the counts measured


def test_report_has_the_curves_the_runs_table_and_physics(tmp_path):
    score = {
        "score": 0.8125,
        "score_raw": 6.0,
        "score_reference_data": 0.5,
        "score_reference_empty": 29.8,
        "score_null_reason": None,
        "bins": [],
        "definition": "...",
    }
    paths = [
        write_run(
            tmp_path / "n1.json",
            1,
            10.0,
            preset="tiny",
            events=512,
            losses=history([(1.0, 3.0), (0.8, 2.5)]),
            physics=score,
        ),
        write_run(
            tmp_path / "n2.json",
            2,
            5.5,
            preset="tiny",
            events=512,
            losses=history([(1.1, 3.2), (0.9, 2.6)]),
            physics={**score, "score": None, "score_null_reason": "too few showers"},
        ),
        write_run(tmp_path / "n4.json", 4, 3.0, preset="tiny", events=512),
    ]
    out = tmp_path / "out"
    written = {str(p.relative_to(out)) for p in write_report(load_results(paths), out)}
    assert {
        "showers_per_second.png",
        "loss_overlay.png",
        "losses/n1.png",
        "losses/n2.png",
        "physics.png",
    } <= written
    assert "losses/n4.png" not in written  # no losses recorded, no plot
    md = (out / "report.md").read_text()
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
        for line in md.splitlines()
        if line.startswith("| n")
    }
    assert rows["n1"][5:10] == [
        "0.8 / 2.5",
        "0.8 / 2.5",
        "0.812",
        "6 (0.5 / 29.8)",
        "[losses/n1.png](losses/n1.png)",
    ]
    assert rows["n2"][7] == "no scale: too few showers" and rows["n4"][5:10] == [
        "- / -",
        "- / -",
        "-",
        "-",
        "-",
    ]
    csv_text = (out / "report.csv").read_text()
    assert "physics_score" in csv_text.splitlines()[0] and "0.8125" in csv_text
    assert "'epoch'" not in csv_text  # the loss history stays in the JSON, not in a CSV cell
    band = physics(next(iter(group_series(load_results(paths)).values())))
    assert band.x == (1,) and band.median == (0.8125,)  # the run without a score is not drawn


def test_a_failed_validation_is_shown_as_failed_with_its_reason_not_as_never_validated(tmp_path):
    score = {
        "score": 0.75,
        "score_raw": 6.0,
        "score_reference_data": 0.5,
        "score_reference_empty": 29.8,
        "score_null_reason": None,
    }
    paths = [
        write_run(tmp_path / "n1.json", 1, 10.0, preset="tiny", events=512, physics=score),
        write_run(tmp_path / "n1b.json", 1, 10.5, preset="tiny", events=512),
        write_run(tmp_path / "n2.json", 2, 5.5, preset="tiny", events=512),
    ]
    why = "gan3d validate: error: [Errno 17] File exists: 'a|b'"
    runs = [
        replace(run, validation=Validation("failed", why)) if run.path.stem == "n1b" else run
        for run in load_results(paths)
    ]
    out = tmp_path / "out"
    write_report(runs, out)
    md = (out / "report.md").read_text()
    cells = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| n")}
    assert "| failed: gan3d validate: error: [Errno 17] File exists: 'a\\|b' |" in cells["n1b"]
    assert cells["n2"].split("|")[8].strip() == "-"  # never validated
    assert "Physics validation failed for 1 run(s): n1b" in md
    by_path = {r["path"]: r for r in csv.DictReader(io.StringIO((out / "report.csv").read_text()))}
    assert [
        (by_path[str(p)]["physics_status"], by_path[str(p)]["physics_problem"]) for p in paths
    ] == [("scored", ""), ("failed", why), ("not validated", "")]
    [ax] = physics_figure(group_series(runs)).axes
    assert any(
        label.endswith("(1 run(s): validation failed, not drawn)")
        for label in ax.get_legend_handles_labels()[1]
    )


@pytest.mark.parametrize(
    "losses, key",
    [
        ("nope", "losses"),
        ([{"epoch": 0, "train": {}}], "losses"),
        ([{"epoch": 1, "train": {"d_loss": "x"}}], "losses"),
        ([{"epoch": 1, "train": {"d_loss": 1e400}}], "losses"),
    ],
)
def test_bad_losses_are_one_line_naming_the_file_and_key(tmp_path, losses, key):
    path = write_run(tmp_path / "r.json", 1, 10.0)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "losses": losses}))
    with pytest.raises(KitError) as exc:
        load_results([path])
    assert str(exc.value).startswith(f"{path}: {key}") and "\n" not in str(exc.value)


def test_bad_physics_names_its_key(tmp_path):
    path = write_run(tmp_path / "r.json", 1, 10.0, physics={"score": "high"})
    with pytest.raises(
        KitError,
        match=r"r\.json: physics\.score: expected a number or null, got str 'high'; fix: re-run",
    ):
        load_results([path])


def test_run_names_are_unique_and_safe(tmp_path):
    paths = [write_run(tmp_path / d / "x y.json", 1, 10.0) for d in ("a", "b")]
    assert list(run_names(load_results(paths)).values()) == ["x_y", "x_y-2"]


def test_the_validators_plots_are_copied_and_links_are_not_followed(tmp_path):
    score = {
        "score": 0.5,
        "score_raw": 3.0,
        "score_reference_data": 1.0,
        "score_reference_empty": 5.0,
    }
    path = write_run(tmp_path / "results" / "n1-x1.json", 1, 10.0, physics=score)
    plots = tmp_path / "results" / "n1-x1.physics"
    plots.mkdir()
    (plots / "physics_score.png").write_bytes(b"\x89PNG score")
    (plots / "physics_10-100GeV.png").write_bytes(
        b"\x89PNG bin"
    )  # per bin: stays beside the results
    (tmp_path / "secret.png").write_bytes(b"not the validator's")
    (plots / "physics_cellsum_vs_energy.png").symlink_to(tmp_path / "secret.png")
    out = tmp_path / "out"
    write_report(load_results([path]), out)
    assert sorted(p.name for p in (out / "physics" / "n1-x1").iterdir()) == ["physics_score.png"]
    assert (out / "physics" / "n1-x1" / "physics_score.png").read_bytes() == b"\x89PNG score"
    assert "| 0.500 [score](physics/n1-x1/physics_score.png) |" in (out / "report.md").read_text()


def test_positive_losses_are_drawn_on_a_log_axis_and_negative_ones_on_a_linear_one(tmp_path):
    positive, mixed = (
        load_results([write_run(tmp_path / f"{name}.json", 1, 10.0, losses=history(h))])[0]
        for name, h in (("p", [(2000.0, 2700.0), (70.0, 80.0)]), ("m", [(1.0, -0.5), (0.5, 0.2)]))
    )
    assert [ax.get_yscale() for ax in loss_figure(positive, "p").axes] == ["log", "log"]
    assert [ax.get_yscale() for ax in loss_figure(mixed, "m").axes] == [
        "log",
        "linear",
    ]  # per axis: G has -0.5
