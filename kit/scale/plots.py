"""The report's figures: the paper's Figures 1-2 (time per epoch, measured vs linear), efficiency,
FLOP rate, and container vs bare; throughput, losses and physics (kit.scale.curves). Error bars are
the repeats' min-max around their median."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

from kit.scale.axes import node_axis
from kit.scale.overhead import Overhead
from kit.scale.paper import OverheadTable, PaperTable, Reference
from kit.scale.rows import UNNAMED_PEAK, comparable_with_paper, flop_unit
from kit.scale.runs import Series

if TYPE_CHECKING:
    from kit.scale.rows import Row


def plots(
    series: dict[Series, list[Row]], overheads: list[Overhead], ref: Reference | None
) -> dict[str, bytes]:
    """PNG bytes by file name; container_overhead.png only when some layout ran both ways."""
    from matplotlib.figure import Figure

    time_fig, eff_fig, flop_fig = (
        Figure(figsize=(7, 4.5)),
        Figure(figsize=(7, 4.5)),
        Figure(figsize=(16, 4.5)),
    )
    t_ax, e_ax = time_fig.subplots(), eff_fig.subplots()
    p_ax, c_ax, f_ax = flop_fig.subplots(1, 3)
    denominators: set[str] = set()
    unit, scale = flop_unit(max(r.flop_per_second for rows in series.values() for r in rows))
    nodes_seen: set[int] = set()
    for i, (key, rows) in enumerate(series.items()):
        style: dict[str, Any] = {"color": f"C{i % 10}"}
        name, nodes = key.name, [r.nodes for r in rows]
        nodes_seen.update(nodes)
        median = [r.seconds_per_epoch for r in rows]
        spread = [
            [m - r.seconds_min for m, r in zip(median, rows)],
            [r.seconds_max - m for m, r in zip(median, rows)],
        ]
        t_ax.errorbar(
            nodes, median, yerr=spread, fmt="o-", capsize=3, label=f"{name} measured", **style
        )
        t_ax.plot(nodes, [r.linear_seconds for r in rows], ":", label=f"{name} linear", **style)
        later = [  # every row after the base has an efficiency and its range
            (r.nodes, e, span)
            for r in rows[1:]
            if (e := r.efficiency_percent) is not None and (span := r.efficiency_range) is not None
        ]
        if later:
            e_ax.errorbar(
                [n for n, _, _ in later],
                [e for _, e, _ in later],
                yerr=[
                    [e - lo for _, e, (lo, _) in later],
                    [hi - e for _, e, (_, hi) in later],
                ],
                fmt="o-",
                capsize=3,
                label=name,
                **style,
            )
        p_ax.plot(nodes, [r.flop_per_second / scale for r in rows], "o-", label=name, **style)
        for denominator in dict.fromkeys(
            r.percent_of_peak_denominator for r in rows if r.percent_of_peak is not None
        ):
            named = denominator or UNNAMED_PEAK
            denominators.add(named)  # one line per denominator, named in the legend
            c_ax.plot(
                *zip(
                    *[
                        (r.nodes, r.percent_of_peak)
                        for r in rows
                        if r.percent_of_peak is not None
                        and r.percent_of_peak_denominator == denominator
                    ]
                ),
                "o-",
                label=f"{name}, of {named}",
                **style,
            )
        paper = [
            (r.nodes, r.percent_of_peak_fp64_max_clock)
            for r in rows
            if r.percent_of_peak_fp64_max_clock is not None
        ]
        if paper:
            f_ax.plot(*zip(*paper), "o-", label=name, **style)
    if isinstance(ref, PaperTable) and ref.seconds_per_epoch:
        if all(comparable_with_paper(key) for key in series):
            t_ax.plot(ref.nodes, ref.seconds_per_epoch, "k--", label=ref.label)
        else:
            _say(t_ax, f"{ref.label}: not drawn, another preset or epoch size (report.md)", y=0.04)
        e_ax.plot(  # the paper's "-" (None) is its base row only
            ref.nodes[1:],
            [math.nan if e is None else e for e in ref.efficiency_percent[1:]],
            "k--",
            label=ref.label,
        )
        nodes_seen.update(ref.nodes)
    elif isinstance(ref, PaperTable):
        p_ax.plot(
            ref.nodes, [p * 1e15 / scale for p in ref.pflop_per_second], "k--", label=ref.label
        )
        f_ax.plot(ref.nodes, ref.percent_of_peak, "k--", label=ref.label)
        nodes_seen.update(ref.nodes)
    if not e_ax.lines:
        _say(e_ax, "needs two node counts in a series", y=0.5)
    ticks = sorted(nodes_seen)
    node_axis(
        t_ax,
        "time per epoch (s, wall clock)",
        "Time per epoch: measured (median, min-max) vs linear",
        ticks=ticks,
        log_y=True,
    )
    node_axis(
        e_ax, "scaling efficiency (%)", "Scaling efficiency: linear / measured time", ticks=ticks
    )
    node_axis(p_ax, f"achieved {unit}", "Achieved FLOP rate", ticks=ticks, log_y=True)
    node_axis(
        c_ax,
        {0: "% of peak (no run has a denominator)", 1: f"% of {next(iter(denominators), '')}"}.get(
            len(denominators), "% of peak: denominators differ, see legend"
        ),
        "% of peak, each of its named denominator",
        ticks=ticks,
    )
    node_axis(
        f_ax, "% of FP64 peak at max clock", "The paper's convention (its Table 7)", ticks=ticks
    )
    out = {
        "time_per_epoch.png": png(time_fig),
        "efficiency.png": png(eff_fig),
        "flops.png": png(flop_fig),
        **curve_plots(series),
    }
    if overheads:
        out["container_overhead.png"] = _overhead_plot(
            overheads, ref if isinstance(ref, OverheadTable) else None
        )
    return out


def curve_plots(series: dict[Series, list[Row]]) -> dict[str, bytes]:
    """showers_per_second.png; loss_overlay.png and losses/RUN.png where runs recorded losses;
    physics.png where runs were validated (names from kit.scale.curves.run_names)."""
    from kit.scale import curves

    out = {"showers_per_second.png": png(curves.throughput_figure(series))}
    runs = [run for rows in series.values() for row in rows for run in row.runs]
    if any(run.losses for run in runs):
        out["loss_overlay.png"] = png(curves.overlay_figure(series))
    names = curves.run_names(runs)
    for i, run in enumerate(runs):
        if run.losses:
            out[f"losses/{names[i]}.png"] = png(
                curves.loss_figure(
                    run,
                    f"{names[i]}: {run.nodes} node(s), global batch {run.global_batch} ({run.series.name})",
                )
            )
    physics = curves.physics_figure(series)
    if physics is not None:
        out["physics.png"] = png(physics)
    return out


def _overhead_plot(overheads: list[Overhead], ref: OverheadTable | None) -> bytes:
    """One bar per layout and node count: the median overhead, the repeats' range as its error
    bar.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 1.2 * len(overheads) + 2), 4.5))
    ax = fig.subplots()
    labels = [
        f"{o.layout.ranks_per_node}x{o.layout.threads_per_rank}/b{o.layout.batch_per_rank}\n"
        f"{o.layout.preset or '?'}, {o.nodes} node{'s' if o.nodes > 1 else ''}"
        for o in overheads
    ]
    values = [o.percent for o in overheads]
    errors = [
        [v - o.percent_range[0] for v, o in zip(values, overheads)],
        [o.percent_range[1] - v for v, o in zip(values, overheads)],
    ]
    ax.bar(
        range(len(values)),
        values,
        yerr=errors,
        capsize=4,
        color="C0",
        label="measured (median, range)",
    )
    ax.set_xticks(range(len(values)), labels, fontsize="small")
    ax.axhline(0, color="black", linewidth=0.8)
    if ref is not None:
        for (bench, percent), style in zip(
            zip(ref.benchmarks, ref.overhead_percent()), ("--", ":")
        ):
            ax.axhline(
                percent, color="k", linestyle=style, label=f"{ref.label.split(' (')[0]}: {bench}"
            )
    ax.set_ylabel("container overhead (% of bare time per epoch)")
    ax.set_title("Container vs bare: (container - bare) / bare wall epoch")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return png(fig)


def _say(ax, text: str, y: float) -> None:
    ax.text(
        0.5,
        y,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize="small",
        color="0.3",
    )


def png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def prediction_plot(
    predictions: list, unseen: dict[str, list[tuple[int, float]]] | None = None
) -> bytes:
    """kit scale predict: per series, time per epoch and efficiency vs nodes, the estimate as a line
    with its band shaded, the measured runs as points (every repeat) and, for a backtest, the rows
    the model did not see as crosses."""
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 4.5))
    t_ax, e_ax = fig.subplots(1, 2)
    ticks: set[int] = set()
    for i, p in enumerate(predictions):
        cal, model, style = p.calibration, p.model, {"color": f"C{i % 10}"}
        nodes = sorted({*cal.nodes, *(f.nodes for f in p.forecasts)})
        ticks.update(nodes)
        grid = np.unique(np.geomspace(nodes[0], nodes[-1], 64).round().astype(int))
        est = np.array([model.seconds(int(n)) for n in grid])
        band = np.array([model.band(int(n)) for n in grid])
        base = model.node_seconds[0]
        t_ax.plot(grid, est, "-", label=f"{cal.label}: {model.describe()}", **style)
        t_ax.fill_between(grid, band[:, 0], band[:, 1], alpha=0.2, **style)
        e_ax.plot(grid, 100 * base / (grid * est), "-", label=cal.label, **style)
        e_ax.fill_between(
            grid,
            100 * base / (grid * band[:, 1]),
            100 * base / (grid * band[:, 0]),
            alpha=0.2,
            **style,
        )
        points = p.measured_points()
        t_ax.plot(*zip(*points), "o", label=f"{cal.label}: measured", **style)
        e_ax.plot([n for n, _ in points], [100 * base / (n * s) for n, s in points], "o", **style)
        later = (unseen or {}).get(cal.label)
        if later:
            t_ax.plot(
                *zip(*later), "x", markersize=8, label=f"{cal.label}: not used in the fit", **style
            )
            e_ax.plot(
                [n for n, _ in later],
                [100 * base / (n * s) for n, s in later],
                "x",
                markersize=8,
                **style,
            )
    node_axis(
        t_ax,
        "time per epoch (s, wall clock)",
        "Predicted time per epoch (band shaded) and measured runs",
        ticks=sorted(ticks),
        log_y=True,
    )
    node_axis(
        e_ax,
        "scaling efficiency (%)",
        "Predicted scaling efficiency vs the smallest measured count",
        ticks=sorted(ticks),
    )
    return png(fig)
