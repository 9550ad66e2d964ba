"""The report's convergence and throughput figures: each run's loss curves, the sweep overlay of
loss vs epoch across node counts (the global batch grows with the nodes: this shows whether scaling
hurt convergence), showers/s vs nodes beside ideal scaling, and the physics score vs nodes.

Each figure is drawn from a `Band` list that the functions here return too, so what is plotted is
what a test can check against the results files."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING

from kit.scale.axes import node_axis
from kit.scale.runs import LOSS_KINDS, LOSS_NAMES, RunResult, Series

if TYPE_CHECKING:
    from kit.scale.rows import Row

LOSS_TITLES = {"d_loss": "discriminator (D) loss", "g_loss": "generator (G) loss"}
MAX_OVERLAY_SERIES = 12  # rows of the overlay figure; more series are named in report.md instead


@dataclass(frozen=True)
class Band:
    """One plotted line: at each x the median of the repeats and their min and max."""

    label: str
    x: tuple[float, ...]
    median: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]


def _band(label: str, points: dict[float, list[float]]) -> Band:
    xs = sorted(points)
    return Band(
        label=label,
        x=tuple(xs),
        median=tuple(median(points[x]) for x in xs),
        low=tuple(min(points[x]) for x in xs),
        high=tuple(max(points[x]) for x in xs),
    )


def loss_overlay(rows: Sequence[Row], kind: str, name: str) -> list[Band]:
    """One band per node count of a series: the loss per epoch, median and min-max over the repeats
    (an epoch only some repeats reached counts those); the label names the global batch."""
    bands = []
    for row in rows:
        points: dict[float, list[float]] = {}
        for run in row.runs:
            curve = run.loss(kind, name)
            for epoch, value in zip(curve.epochs, curve.values) if curve else ():
                points.setdefault(epoch, []).append(value)
        if points:
            batches = sorted({run.global_batch for run in row.runs})
            bands.append(
                _band(
                    f"{row.nodes} node{'s' if row.nodes > 1 else ''}, "
                    f"global batch {'/'.join(map(str, batches))}",
                    points,
                )
            )
    return bands


def throughput(rows: Sequence[Row]) -> tuple[Band, Band]:
    """Showers/s per node count (median, min-max over the repeats) and ideal scaling from the
    smallest node count's median: S(n0) x n / n0."""
    measured = _band(
        "measured", {row.nodes: [r.showers_per_second for r in row.runs] for row in rows}
    )
    base_nodes, base = measured.x[0], measured.median[0]
    ideal = tuple(base * n / base_nodes for n in measured.x)
    return measured, Band(
        label="ideal (linear in nodes)", x=measured.x, median=ideal, low=ideal, high=ideal
    )


def physics(rows: Sequence[Row]) -> Band | None:
    """The physics score per node count over the repeats that have one; None if no run has one."""
    points: dict[float, list[float]] = {
        row.nodes: [r.physics.score for r in row.runs if r.physics and r.physics.score is not None]
        for row in rows
    }
    points = {n: v for n, v in points.items() if v}
    return _band("physics score", points) if points else None


def run_names(runs: Sequence[RunResult]) -> dict[int, str]:
    """A file-name-safe, unique name per run (by position), from its results file's name."""
    names: dict[int, str] = {}
    taken: set[str] = set()
    for i, run in enumerate(runs):
        base = re.sub(r"[^A-Za-z0-9._-]", "_", run.path.stem)[:80] or "run"
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name)
        names[i] = name
    return names


def loss_figure(run: RunResult, title: str):
    """D and G loss per epoch of one run, train (solid) and validation (dashed), over rank 0's
    logged steps (grey) where the results have them."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    for ax, name in zip(fig.subplots(1, 2), LOSS_NAMES):
        steps = next((c for c in run.step_losses if c.name == name), None)
        if steps:  # underneath: single steps of rank 0's batch are noisier than the epoch means
            ax.plot(
                steps.epochs,
                steps.values,
                "-",
                color="0.7",
                linewidth=0.8,
                label="train, rank 0 per step",
            )
        for kind, style in zip(LOSS_KINDS, ("o-", "s--")):
            curve = run.loss(kind, name)
            if curve:
                ax.plot(curve.epochs, curve.values, style, label=kind)
        _epoch_axis(ax, LOSS_TITLES[name], LOSS_TITLES[name])
    fig.suptitle(title, fontsize="medium")
    return fig


def overlay_figure(series: dict[Series, list[Row]]):
    """Per series (a row of panels): D and G train loss vs epoch, one line per node count with its
    repeats' min-max shaded, validation dashed in the same colour."""
    from matplotlib.figure import Figure

    shown = [
        (key, rows)
        for key, rows in series.items()
        if any(run.losses for row in rows for run in row.runs)
    ][:MAX_OVERLAY_SERIES]
    fig = Figure(figsize=(12, 3.6 * len(shown) + 0.6))
    axes = fig.subplots(len(shown), 2, squeeze=False)
    for (key, rows), pair in zip(shown, axes):
        for ax, name in zip(pair, LOSS_NAMES):
            for kind in LOSS_KINDS:
                for j, band in enumerate(loss_overlay(rows, kind, name)):
                    style = {"color": f"C{j % 10}"}
                    if kind == "train":
                        ax.plot(band.x, band.median, "o-", label=band.label, **style)
                        ax.fill_between(band.x, band.low, band.high, alpha=0.2, **style)
                    else:
                        ax.plot(
                            band.x, band.median, "--", label=f"{band.label} (validation)", **style
                        )
            _epoch_axis(
                ax,
                LOSS_TITLES[name],
                f"{key.name}\n{LOSS_TITLES[name]}: train (solid, min-max shaded), "
                "validation (dashed)",
            )
    fig.suptitle("Loss vs epoch across node counts: median of the repeats", fontsize="medium")
    return fig


def throughput_figure(series: dict[Series, list[Row]]):
    """Showers/s vs nodes per series, median with min-max error bars, beside its ideal scaling."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    ticks: set[int] = set()
    for i, (key, rows) in enumerate(series.items()):
        measured, ideal = throughput(rows)
        ticks.update(int(x) for x in measured.x)
        ax.errorbar(
            measured.x,
            measured.median,
            yerr=_spread(measured),
            fmt="o-",
            capsize=3,
            color=f"C{i % 10}",
            label=f"{key.name} measured",
        )
        ax.plot(ideal.x, ideal.median, ":", color=f"C{i % 10}", label=f"{key.name} ideal")
    node_axis(
        ax,
        "showers/s (job)",
        "Throughput: showers/s (median, min-max) vs ideal scaling",
        ticks=sorted(ticks),
        log_y=True,
    )
    return fig


def physics_figure(series: dict[Series, list[Row]]):
    """The physics score vs nodes (1 = like held-out data, 0 = like empty showers), or None."""
    from matplotlib.figure import Figure

    drawn = [
        (key, band, sum(r.physics_status == "failed" for row in rows for r in row.runs))
        for key, rows in series.items()
        if (band := physics(rows))
    ]
    if not drawn:
        return None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, (key, band, failed) in enumerate(drawn):
        ax.errorbar(
            band.x,
            band.median,
            yerr=_spread(band),
            fmt="o-",
            capsize=3,
            color=f"C{i % 10}",
            label=key.name
            + (f" ({failed} run(s): validation failed, not drawn)" if failed else ""),
        )
    ax.axhline(1.0, color="g", linestyle="--", label="held-out data (1)")
    ax.axhline(0.0, color="r", linestyle="--", label="empty showers (0)")
    node_axis(
        ax,
        "physics score (fixed scale)",
        "Physics score of the final checkpoint (median, min-max)",
        ticks=sorted({int(x) for _, band, _ in drawn for x in band.x}),
    )
    return fig


def _spread(band: Band) -> list[list[float]]:
    return [
        [m - lo for m, lo in zip(band.median, band.low)],
        [hi - m for m, hi in zip(band.median, band.high)],
    ]


def _epoch_axis(ax, ylabel: str, title: str) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
    values = [y for line in ax.lines for y in line.get_ydata()]
    # a first epoch 100x the later ones would flatten them on a linear axis
    if values and min(values) > 0:
        ax.set_yscale("log")
        ylabel += " (log)"
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="small")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="x-small")
