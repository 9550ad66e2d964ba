"""`kit scale predict`'s band, measured on laws it was not built on (tests/scale/laws.py): the
truth inside it in at least 90% of forecasts at 8x and 64x the largest measured count, and no wider
than the figures docs/predict.md gives (bench/predict_coverage.py measures them on 400 laws).
Then what the command prints of the parts, a fallback said so, and labels read from files."""

from __future__ import annotations

import json
from functools import cache
from statistics import median

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.cli import main
from kit.scale import load_results
from kit.scale.predict import Calibration, predict, predict_runs
from tests.scale.builders import write_run
from tests.scale.laws import Law, calibration, random_law

LAWS = 60  # the bench draws 400; these, from a fixed seed, take a few seconds


@cache
def _forecasts(whole: bool = False, laws: int = LAWS):
    rng = np.random.default_rng(7)
    out = []
    for _ in range(laws):
        law = random_law(rng)
        p = predict(calibration(law, rng, split=not whole), [64, 512])
        out += [(f, law.epoch(f.nodes)) for f in p.forecasts]
    return out


def test_the_truth_is_inside_the_band_in_90_percent_of_generated_laws_at_8x_and_64x():
    rows = _forecasts()
    for nodes, widest in ((64, 1.2), (512, 2.0)):
        at = [(f, t) for f, t in rows if f.nodes == nodes]
        inside = sum(f.seconds_band[0] <= t <= f.seconds_band[1] for f, t in at)
        assert inside >= 0.9 * len(at), (nodes, inside)
        width = median((f.seconds_band[1] - f.seconds_band[0]) / f.seconds for f, _ in at)
        assert width < widest, (nodes, width)
        assert median(abs(f.seconds - t) / t for f, t in at) < 0.1


def test_cut_epochs_fitted_whole_miss_what_the_parts_fitted_apart_hold():
    """The calibration's 20-step epochs, scaled whole to full ones, carry 281x the per-epoch cost
    at one node: the whole-epoch fit (results without step times) cannot recover from that."""
    apart = _forecasts()
    whole = _forecasts(whole=True, laws=20)

    def error(rows):
        return median(abs(f.seconds - t) / t for f, t in rows)

    assert error(apart) < 0.1 < error(whole)


@settings(max_examples=20, deadline=None)
@given(
    overhead=st.sampled_from(["log", "straggler"]),
    share=st.floats(0.02, 0.4),
    per_epoch=st.sampled_from(["constant", "log", "linear"]),
    growth=st.floats(0.05, 0.5),
    rest_share=st.floats(0.005, 0.2),
)
def test_noise_free_laws_of_the_model_s_own_shapes_are_inside_the_band(
    overhead, share, per_epoch, growth, rest_share
):
    law = Law(
        overhead=overhead,
        share=share,
        gamma=0.5,
        per_epoch=per_epoch,
        growth=growth,
        rest_share=rest_share,
        noise=0.0,
        straggler_run=False,
    )
    p = predict(calibration(law, np.random.default_rng(0)), [16, 64, 512, 4096])
    for f in p.forecasts:
        truth = law.epoch(f.nodes)
        assert f.seconds == pytest.approx(truth, rel=1e-6)
        assert f.seconds_band[0] <= truth <= f.seconds_band[1]


def test_results_without_step_times_are_fitted_whole_and_say_so(tmp_path, capsys):
    paths = [
        write_run(
            tmp_path / f"n{n}-x{i}.json",
            n,
            100.0 / n * (1 + 0.01 * i),
            epoch_step_seconds=None,
            full_epoch_seconds_estimate=None,
        )
        for n in (1, 2, 8)
        for i in range(3)
    ]
    [p], _ = predict_runs(load_results(paths), [64])
    assert p.model.per_epoch is None and p.forecasts[0].steps_seconds is None
    assert any(w.startswith("the results hold no step times") for w in p.warnings)
    assert main(["scale", "predict", "--results", *map(str, paths), "--json"]) == 0
    [series] = json.loads(capsys.readouterr().out)["series"]
    assert not series["model"]["fitted_apart"] and series["model"]["per_epoch"] is None
    assert series["forecasts"][0]["per_epoch_seconds"] is None


def test_the_table_says_what_drives_each_forecast(tmp_path, capsys, monkeypatch):
    """Per forecast count: the share of the epoch in steps and in per-epoch costs, and the time
    per step against the smallest count."""
    monkeypatch.setenv("COLUMNS", "400")  # one line per row: no cell folded
    step = {1: 1.0, 2: 1.05, 8: 1.15}  # s per step; 4 s paid once per epoch
    paths = []
    for n, s in step.items():
        full = 180_000 // (4 * n) // 8
        wall = full * s + 4.0
        paths += [
            write_run(tmp_path / f"n{n}-x{i}.json", n, wall, step_share=full * s / wall)
            for i in range(3)
        ]
    assert main(["scale", "predict", "--results", *map(str, paths), "--nodes", "512"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    [p], _ = predict_runs(load_results(paths), [512])
    f = p.forecasts[0]
    share = (
        f"{100 * f.steps_seconds / f.seconds:.0f}% / {100 * f.per_epoch_seconds / f.seconds:.0f}%"
    )
    assert share in out and f"({f.step_overhead_percent:+.1f}%)" in out
    assert f.per_epoch_seconds == pytest.approx(4.0, rel=1e-6) and f.step_overhead_percent > 15
    assert "steps and per-epoch costs fitted apart" in out


def test_labels_read_from_files_print_as_text(tmp_path, capsys):
    """A site named `[/]` (rich markup that ends a style) or a label with ESC and 10 KB: printed
    as text, escaped and bounded, never read as markup."""
    from kit.scale.predict_view import show

    paths = [
        write_run(tmp_path / f"n{n}-x{i}.json", n, 100.0 / n, site="[/]")
        for n in (1, 2)
        for i in range(2)
    ]
    assert main(["scale", "predict", "--results", *map(str, paths)]) == 0
    assert "[/]/4x12/b8/" in capsys.readouterr().out
    label = "[/]\x1b[31m" + "x" * 10_000
    cal = Calibration(
        label=label,
        ranks_per_node=4,
        nodes=(1, 2),
        seconds=((100.0,), (51.0,)),
        events_per_epoch=180_000,
        batch_per_rank=8,
        stack=label,
    )
    show([predict(cal, [8])], [], epochs=None)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31m" in out and "[/]" in out
    assert out.count("x") < 2 * 1000 + 100  # title and stack, each cut to 1000 characters
