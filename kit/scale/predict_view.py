"""`kit scale predict`'s tables and lines. Every value read from a results file (a series name, a
site, a stack) is printed as text, never as markup: escaped and bounded by kit.excerpt.printable."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kit.errors import KitError
from kit.excerpt import plain_console, printable_text
from kit.scale.model import POWER, Fit
from kit.scale.predict import Backtest, Prediction
from kit.scale.rows import flop_unit

LINE = 1000  # a line the kit composed around values read from files


def _band(low: float, high: float, fmt: str = "{:.3g}") -> str:
    return f"[{fmt.format(low)}–{fmt.format(high)}]"


def forecast_table(
    title: str,
    prediction: Prediction,
    epochs: int | None,
    *,
    measured: dict[int, float] | None = None,
) -> Table:
    """One row per asked node count: the epoch and its band, and what drives it (the share of the
    epoch in steps and in costs paid once per epoch, the time per step against the smallest
    count); a backtest adds the paper's time and the error."""
    split = prediction.model.per_epoch is not None
    table = Table(title=printable_text(title, LINE))
    columns = [
        "nodes",
        "s/epoch [band]",
        *(["paper s", "error"] if measured else []),
        *(["steps / per-epoch", "s/step vs smallest"] if split else []),
        "showers/s",
        "FLOP/s",
        "% of peak",
        "efficiency [band]",
        "steps/epoch",
        "global batch",
        "node-h/epoch [band]",
        *([f"node-h, {epochs} epochs"] if epochs else []),
    ]
    for col in columns:
        table.add_column(col, overflow="fold")
    rates = [rate for f in prediction.forecasts if (rate := f.flop_per_second)]
    unit, scale = flop_unit(max(rates)) if rates else ("FLOP/s", 1.0)
    for f in prediction.forecasts:
        paper = []
        if measured:
            t = measured[f.nodes]
            paper = [
                f"{t:g}",
                f"{100 * (f.seconds - t) / t:+.1f}%"
                + ("" if f.seconds_band[0] <= t <= f.seconds_band[1] else " (outside)"),
            ]
        drivers = []
        if split:
            steps, rest = f.steps_seconds or 0.0, f.per_epoch_seconds or 0.0
            drivers = [
                f"{100 * steps / f.seconds:.0f}% / {100 * rest / f.seconds:.0f}%",
                f"{f.step_seconds:.3g} s"
                + (
                    "" if f.step_overhead_percent is None else f" ({f.step_overhead_percent:+.1f}%)"
                ),
            ]
        cells = [
            str(f.nodes),
            f"{f.seconds:.4g} {_band(*f.seconds_band)}",
            *paper,
            *drivers,
            "-" if f.showers_per_second is None else f"{f.showers_per_second:.4g}",
            "-" if f.flop_per_second is None else f"{f.flop_per_second / scale:.3g} {unit}",
            "-" if f.percent_of_peak is None else f"{f.percent_of_peak:.1f}%",
            f"{f.efficiency_percent:.1f}% {_band(*f.efficiency_band, '{:.1f}')}",
            "-" if f.steps_per_epoch is None else str(f.steps_per_epoch),
            "-" if f.global_batch is None else str(f.global_batch),
            f"{f.node_hours_per_epoch:.3g} {_band(*f.node_hours_band)}",
            *([f"{f.node_hours_total:.3g}"] if epochs else []),
        ]
        table.add_row(*(Text(c) for c in cells))
    return table


def _shapes(fits: Sequence[Fit]) -> str:
    """The kept shapes, the power family's as one range: `straggler, power -0.9 to +0.9`."""
    named = [f.name for f in fits if not f.name.startswith(POWER)]
    gammas = [f.gamma for f in fits if f.name.startswith(POWER) and f.gamma is not None]
    if gammas:
        named.append(f"power {min(gammas):+.1f} to {max(gammas):+.1f}")
    return ", ".join(dict.fromkeys(named))


def _line(console: Console, text: str, label: str = "", style: str = "") -> None:
    out = Text(label, style=style) + Text(": " if label else "") + printable_text(text, LINE)
    console.print(out)


def print_prediction(
    console: Console,
    prediction: Prediction,
    *,
    epochs: int | None,
    title: str,
    measured: dict[int, float] | None = None,
) -> None:
    model, cal = prediction.model, prediction.calibration
    console.print(forecast_table(title, prediction, epochs, measured=measured))
    parts = [model.step] + ([model.per_epoch] if model.per_epoch else [])
    shapes = "; ".join(
        f"{p.what}: {_shapes(p.kept)}, "
        f"widened {100 * p.per_doubling:.1f}% per doubling beyond the largest measured count"
        for p in parts
    )
    counts = ", ".join(f"{n} node(s) x{len(s)}" for n, s in zip(cal.nodes, cal.seconds))
    how = (
        "steps and per-epoch costs fitted apart"
        if model.per_epoch
        else "the epoch fitted whole (no step times)"
    )
    _line(
        console,
        f"measured: {counts}; {how}; estimate: {model.describe()}; band: "
        f"{shapes} (kit docs predict)",
    )
    if cal.stack:
        _line(console, cal.stack, "stack")
    if cal.peak_denominator and cal.node_peak:
        _line(
            console,
            f"of the {cal.peak_denominator} ({cal.node_peak / 1e12:.3g} TFLOP/s per node); "
            "FLOP/s: model FLOP per shower x showers/s over the wall epoch",
            "% of peak",
        )
    for warning in prediction.warnings:
        _line(console, warning, "warning", "yellow")
    if prediction.suggestion:
        _line(console, prediction.suggestion, "next")


def show(
    predictions: Sequence[Prediction],
    skipped: Sequence[KitError],
    *,
    epochs: int | None,
    backtest: Backtest | None = None,
    calibrate_on: int | None = None,
) -> None:
    """Everything `kit scale predict` prints without --json."""
    console = plain_console()
    for left in skipped:
        _line(console, left.line(), "left out", "yellow")
    for p in predictions:
        if backtest is None:
            print_prediction(console, p, epochs=epochs, title=f"{p.calibration.label}: predicted")
            continue
        rows = {r.nodes: r.measured for r in backtest.rows}
        print_prediction(
            console,
            p,
            epochs=epochs,
            title=f"{p.calibration.label}: fitted on its first {calibrate_on} rows",
            measured=rows,
        )
        for r in backtest.rows:
            if r.anomaly and not r.inside:
                console.print(
                    printable_text(f"{r.nodes} nodes: outside the band: {r.anomaly}", LINE)
                )
